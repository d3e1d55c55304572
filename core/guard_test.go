package core_test

import (
	"context"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfunc"
)

// TestGuardDryRunReportsOnce checks that a dry-run guard's observer sees
// each request once: admissions as such, denials with DryRun set and never
// as plain denials as well.
func TestGuardDryRunReportsOnce(t *testing.T) {
	l := mustLimiter(t, core.NewMemoryStore(), "dry", core.Rule{Limit: 2, Window: time.Minute})
	var (
		mu     sync.Mutex
		events []core.Event
	)
	obs := core.ObserverFunc(func(_ context.Context, e core.Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	})
	g := core.NewGuard(l, core.WithDryRun(true), core.WithGuardObserver(obs))
	for range 5 {
		r := httptest.NewRequest("GET", "/", nil)
		v := g.Check(context.Background(), keyfunc.FromHTTP(r, ""))
		if !v.Proceed() {
			t.Fatalf("dry run blocked a request: %+v", v.Outcome)
		}
	}
	var allowed, dry, plainDenied int
	for _, e := range events {
		if e.Kind != core.EventDecision {
			continue
		}
		switch {
		case e.Decision.Allowed:
			allowed++
		case e.DryRun:
			dry++
		default:
			plainDenied++
		}
	}
	if allowed != 2 || dry != 3 || plainDenied != 0 {
		t.Errorf("events: %d allowed, %d dry-run denials, %d plain denials; want 2, 3, 0", allowed, dry, plainDenied)
	}
}
