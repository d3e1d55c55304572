package ratekitotel_test

import (
	"context"
	"fmt"
	"log"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/ratekitotel"
)

func ExampleNew() {
	reader := sdkmetric.NewManualReader() // an app would use a periodic OTLP exporter
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	obs, err := ratekitotel.New(provider.Meter("github.com/ratekit/ratekit"))
	if err != nil {
		log.Fatal(err)
	}
	l, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{Name: "api", Rules: []core.Rule{{Limit: 10, Window: time.Second}}},
		core.WithObserver(obs))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	for range 3 {
		_, _ = l.Allow(ctx, "app-1")
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "ratekit.decisions" {
			fmt.Println(m.Name, sum.DataPoints[0].Value)
		}
	}
	// Output:
	// ratekit.decisions 3
}
