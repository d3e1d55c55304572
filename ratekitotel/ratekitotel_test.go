package ratekitotel_test

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/observertest"
	"github.com/ratekit/ratekit/ratekitotel"
)

// series names a data point: "name{k=v,...}" with sorted attributes.
func series(name string, set attribute.Set) string {
	var kvs []string
	for _, kv := range set.ToSlice() {
		kvs = append(kvs, string(kv.Key)+"="+kv.Value.String())
	}
	sort.Strings(kvs)
	return name + "{" + strings.Join(kvs, ",") + "}"
}

// collect reads every data point: counters and gauges by value,
// histograms by count.
func collect(t *testing.T, r *sdkmetric.ManualReader) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	out := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[series(m.Name, p.Attributes)] = float64(p.Value)
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out[series(m.Name, p.Attributes)] = float64(p.Value)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[series(m.Name, p.Attributes)] = float64(p.Count)
				}
			default:
				t.Errorf("%s: unexpected data type %T", m.Name, m.Data)
			}
		}
	}
	return out
}

func TestMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = provider.Shutdown(context.Background()) }()
	obs, err := ratekitotel.New(provider.Meter("ratekit-test"))
	if err != nil {
		t.Fatal(err)
	}
	observertest.Run(t, obs, func() {
		if got := collect(t, reader)["ratekit.breaker.open{ratekit.policy=flaky}"]; got != 1 {
			t.Errorf("ratekit.breaker.open{flaky} = %v while open, want 1", got)
		}
	})

	got := collect(t, reader)
	tests := []struct {
		series string
		want   float64
	}{
		{"ratekit.decisions{ratekit.outcome=allowed,ratekit.policy=login,ratekit.source=store}", 2},
		{"ratekit.decisions{ratekit.outcome=denied,ratekit.policy=login,ratekit.source=store}", 1},
		{"ratekit.decisions{ratekit.outcome=denied,ratekit.policy=login,ratekit.source=cache}", 1},
		{"ratekit.deny_cache.hits{ratekit.policy=login}", 1},
		{"ratekit.skips{ratekit.policy=login}", 1},
		{"ratekit.blocks{ratekit.policy=login}", 1},
		{"ratekit.lockouts{ratekit.policy=ban}", 2},
		{"ratekit.decisions{ratekit.outcome=allowed,ratekit.policy=ban,ratekit.source=store}", 1},
		{"ratekit.decisions{ratekit.outcome=denied,ratekit.policy=ban,ratekit.source=store}", 2},
		{"ratekit.key_errors{ratekit.policy=login}", 1},
		{"ratekit.store.duration{ratekit.policy=login,ratekit.result=ok}", 3},
		{"ratekit.decisions{ratekit.outcome=allowed,ratekit.policy=dry,ratekit.source=store}", 1},
		{"ratekit.decisions{ratekit.outcome=denied,ratekit.policy=dry,ratekit.source=store}", 1},
		{"ratekit.dry_run.denials{ratekit.policy=dry}", 1},
		// dry is on a MemoryStore: its decisions take no measurable time
		// and report none.
		{"ratekit.store.errors{ratekit.policy=flaky}", 2},
		{"ratekit.store.duration{ratekit.policy=flaky,ratekit.result=error}", 2},
		{"ratekit.store.duration{ratekit.policy=flaky,ratekit.result=ok}", 1},
		{"ratekit.fallbacks{ratekit.policy=flaky,ratekit.source=local}", 3},
		{"ratekit.decisions{ratekit.outcome=allowed,ratekit.policy=flaky,ratekit.source=local}", 3},
		{"ratekit.decisions{ratekit.outcome=allowed,ratekit.policy=flaky,ratekit.source=store}", 1},
		{"ratekit.breaker.opens{ratekit.policy=flaky}", 1},
		{"ratekit.breaker.open{ratekit.policy=flaky}", 0},
		{"ratekit.challenges{ratekit.policy=captcha}", 2},
		{"ratekit.passes{ratekit.policy=captcha}", 1},
		{"ratekit.decisions{ratekit.outcome=denied,ratekit.policy=captcha,ratekit.source=store}", 2},
		{"ratekit.decisions{ratekit.outcome=allowed,ratekit.policy=captcha,ratekit.source=store}", 1},
	}
	for _, tc := range tests {
		v, ok := got[tc.series]
		if !ok {
			t.Errorf("%s not collected", tc.series)
			continue
		}
		if v != tc.want {
			t.Errorf("%s = %v, want %v", tc.series, v, tc.want)
		}
	}
	// Exactly the series above (plus nothing keyed): no dry-run series
	// for login, no key anywhere.
	if len(got) != len(tests) {
		t.Errorf("collected %d series, want %d: %v", len(got), len(tests), got)
	}
	for s := range got {
		if strings.Contains(s, "alice") || strings.Contains(s, "carol") || strings.Contains(s, "bob") || strings.Contains(s, "trudy") {
			t.Errorf("series %s carries a key", s)
		}
	}
}

func TestNew(t *testing.T) {
	tests := []struct {
		name    string
		opts    []ratekitotel.Option
		buckets int
	}{
		{"default buckets", nil, len(ratekitotel.DefaultBuckets())},
		{"own buckets", []ratekitotel.Option{ratekitotel.WithBuckets([]float64{0.001, 0.01})}, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reader := sdkmetric.NewManualReader()
			provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			obs, err := ratekitotel.New(provider.Meter("t"), tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			obs.Observe(context.Background(), core.Event{Kind: core.EventDecision, Policy: "p",
				Decision: core.Decision{Allowed: true, Source: core.SourceStore}, Latency: time.Millisecond})
			var rm metricdata.ResourceMetrics
			if err := reader.Collect(context.Background(), &rm); err != nil {
				t.Fatal(err)
			}
			found := false
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					if h, ok := m.Data.(metricdata.Histogram[float64]); ok {
						found = true
						if n := len(h.DataPoints[0].Bounds); n != tc.buckets {
							t.Errorf("%s has %d bounds, want %d", m.Name, n, tc.buckets)
						}
					}
				}
			}
			if !found {
				t.Error("no histogram collected")
			}
		})
	}
	if _, err := ratekitotel.New(nil); err == nil {
		t.Error("New(nil) succeeded, want an error")
	}
}

// BenchmarkObserve measures the cost the observer adds to a decision.
func BenchmarkObserve(b *testing.B) {
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	obs, err := ratekitotel.New(provider.Meter("bench"))
	if err != nil {
		b.Fatal(err)
	}
	e := core.Event{Kind: core.EventDecision, Policy: "p", Decision: core.Decision{Allowed: true, Source: core.SourceStore}, Latency: time.Millisecond}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		obs.Observe(ctx, e)
	}
}
