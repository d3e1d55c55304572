package ratekitslog_test

import (
	"context"
	"errors"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/ratekitslog"
)

// downStore is a store that is down: its decisions fail, and so do the
// breaker's probes (Peek), which may run after the example's requests.
type downStore struct{ core.Store }

func (downStore) Take(context.Context, driver.Query) (driver.Result, error) {
	return driver.Result{}, errors.New("connection refused")
}

func (downStore) Peek(context.Context, driver.Query) (driver.Result, error) {
	return driver.Result{}, errors.New("connection refused")
}

func ExampleNew() {
	// A text logger without timestamps, so the output is deterministic.
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "latency" {
				return slog.Attr{}
			}
			return a
		},
	}))
	l, err := core.NewLimiter(downStore{}, core.Policy{Name: "login", Rules: []core.Rule{{Limit: 5, Window: time.Minute}}},
		core.WithObserver(ratekitslog.New(logger, time.Minute)))
	if err != nil {
		log.Fatal(err)
	}
	// A hundred requests during the outage log three lines: the first
	// store failure, the start of the decisions by the failure policy and
	// the breaker opening. The rest are counted, not logged.
	for range 100 {
		_, _ = l.Allow(context.Background(), "alice")
	}
	// Output:
	// level=WARN msg="ratekit: store call failed; the failure policy decided" policy=login error="connection refused" suppressed=0
	// level=WARN msg="ratekit: store failed; deciding by the failure policy until it answers" policy=login error="connection refused" suppressed=0
	// level=ERROR msg="ratekit: circuit breaker opened; store calls stop for the cool-down" policy=login error="connection refused" suppressed=0
}
