package core_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// TestPeekIsNotADecision: a peek is not reported to observers as a
// decision. (That a peek that meets a failing store does not count toward
// the circuit breaker is internal/test/redissuite's PeekIsNotADecision, on a
// stopped Redis.)
func TestPeekIsNotADecision(t *testing.T) {
	var decisions atomic.Int64
	obs := core.ObserverFunc(func(_ context.Context, e core.Event) {
		if e.Kind == core.EventDecision {
			decisions.Add(1)
		}
	})
	ctx := context.Background()
	l := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "peek", Rules: []core.Rule{{Limit: 1, Window: time.Minute}}}, core.WithObserver(obs))
	_, _ = l.Allow(ctx, "k")
	for range 10 {
		if _, err := l.Peek(ctx, "k"); err != nil {
			t.Fatal(err)
		}
	}
	if n := decisions.Load(); n != 1 {
		t.Errorf("1 Allow and 10 Peeks reported %d decisions, want 1", n)
	}
}
