package testkit

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
)

// WaitNoStampede checks on b that many callers waiting for one key on
// one instance make about one store decision per admission, not one per
// caller per freed unit: only the first in line asks.
func WaitNoStampede(t *testing.T, b Backend) {
	const (
		limit   = 2
		window  = 50 * time.Millisecond
		callers = 40
	)
	obs := &EventCounts{}
	l := Fleet(t, 1, b, core.Policy{Name: "stampede", Rules: []core.Rule{{Limit: limit, Window: window}}}, core.WithObserver(obs))[0]
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range callers {
		wg.Go(func() {
			<-start
			if d, err := l.Wait(context.Background(), "k"); err != nil || !d.Allowed {
				t.Errorf("Wait(k) = %+v, %v", d, err)
			}
		})
	}
	close(start)
	wg.Wait()
	// Each caller may ask once on arrival; after that, each admission
	// costs the first in line its admission and about one denial.
	// Were every caller to ask each time a unit frees, that would be
	// about callers/2 decisions per admission.
	got, bound := obs.Count(core.EventDecision), callers+3*callers
	t.Logf("%d callers, %d decisions (%.1f per admission; at most %d allowed)", callers, got, float64(got)/callers, bound)
	if got > bound {
		t.Errorf("%d decisions for %d admissions, want at most %d: waiters stampede the store", got, callers, bound)
	}
	if n := obs.Fallbacks(); n != 0 {
		t.Errorf("%d fallback decisions, want 0", n)
	}
}

// WaitInFlight checks on b that a concurrency slot has no known wait: a
// waiter is not refused for its deadline on the strength of the 1 s
// hint, wakes as soon as this instance releases a lease, and sees one
// released on another instance within a poll: well before the hint
// either way (the bounds leave room for a loaded machine).
func WaitInFlight(t *testing.T, b Backend) {
	p := core.Policy{Name: "wait-inflight", InFlight: 1}
	ls := Fleet(t, 2, b, p)
	ctx := context.Background()
	for _, c := range []struct {
		name     string
		holder   *core.Limiter
		deadline time.Duration // 0: none
		within   time.Duration
	}{
		{"same instance, deadline", ls[0], 800 * time.Millisecond, 300 * time.Millisecond},
		{"same instance, no deadline", ls[0], 0, 300 * time.Millisecond},
		{"other instance", ls[1], 800 * time.Millisecond, 400 * time.Millisecond},
	} {
		held, err := c.holder.Allow(ctx, "slot")
		if err != nil || !held.Allowed {
			t.Fatalf("%s: Allow(slot) = %+v, %v", c.name, held, err)
		}
		const holdFor = 50 * time.Millisecond
		go func() {
			time.Sleep(holdFor)
			_ = held.Refund(ctx)
		}()
		wctx, cancel := ctx, context.CancelFunc(func() {})
		if c.deadline > 0 {
			wctx, cancel = context.WithTimeout(ctx, c.deadline)
		}
		start := time.Now()
		d, err := ls[0].Wait(wctx, "slot")
		took := time.Since(start)
		cancel()
		if err != nil || !d.Allowed {
			t.Fatalf("%s: Wait(slot) = %+v, %v after %v; want admitted once the slot is released (after %v)", c.name, d, err, took, holdFor)
		}
		if took < holdFor-5*time.Millisecond || took > holdFor+c.within {
			t.Errorf("%s: Wait admitted after %v, want about %v (+ at most %v)", c.name, took, holdFor, c.within)
		}
		_ = d.Refund(ctx)
	}
}
