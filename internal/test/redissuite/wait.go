package redissuite

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// testWaitNoStampede: many callers waiting for one key on one instance
// make about one store decision per admission, not one per caller per
// freed unit: only the first in line asks.
func testWaitNoStampede(t *testing.T, drv Driver) {
	const (
		limit   = 2
		window  = 50 * time.Millisecond
		callers = 40
	)
	for _, f := range []testkit.Backend{fleetBackend(drv)} {
		t.Run(f.Name, func(t *testing.T) {
			t.Parallel()
			var decisions, fallbacks atomic.Int64
			obs := core.ObserverFunc(func(_ context.Context, e core.Event) {
				if e.Kind == core.EventDecision {
					decisions.Add(1)
					if e.Decision.Source.Fallback() {
						fallbacks.Add(1)
					}
				}
			})
			l := testkit.Fleet(t, 1, f, core.Policy{Name: "stampede", Rules: []core.Rule{{Limit: limit, Window: window}}}, core.WithObserver(obs))[0]
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
			got, bound := decisions.Load(), int64(callers+3*callers)
			t.Logf("%d callers, %d decisions (%.1f per admission; at most %d allowed)", callers, got, float64(got)/callers, bound)
			if got > bound {
				t.Errorf("%d decisions for %d admissions, want at most %d: waiters stampede the store", got, callers, bound)
			}
			if fallbacks.Load() != 0 {
				t.Errorf("%d fallback decisions, want 0", fallbacks.Load())
			}
		})
	}
}

// testWaitInFlight: a concurrency slot has no known wait: a waiter is
// not refused for its deadline on the strength of the 1 s hint, wakes as
// soon as this instance releases a lease, and sees one released on
// another instance within a poll: well before the hint either way (the
// bounds leave room for a loaded machine).
func testWaitInFlight(t *testing.T, drv Driver) {
	p := core.Policy{Name: "wait-inflight", InFlight: 1}
	for _, b := range []testkit.Backend{fleetBackend(drv)} {
		t.Run(b.Name, func(t *testing.T) {
			ls := testkit.Fleet(t, 2, b, p)
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
		})
	}
}

// testWaitFailClosed: a FailClosed refusal is waited out until the store
// answers again, and fails fast when the limiter will not try the store
// again before the deadline; FailOpen admits at once.
func testWaitFailClosed(t *testing.T, drv Driver) {
	t.Parallel()
	srv := redistest.Start(t)
	var closed atomic.Int64
	obs := core.ObserverFunc(func(_ context.Context, e core.Event) {
		if e.Kind == core.EventDecision && e.Decision.Source == core.SourceClosed {
			closed.Add(1)
		}
	})
	p := core.Policy{Name: "closed", Rules: []core.Rule{{Limit: 5, Window: time.Minute}}}
	// A short store timeout, so that a call to the stopped server fails
	// well before the callers' deadlines whatever the client does to dial.
	l := testkit.Limiter(t, drv.New(t, srv), p, core.WithTimeout(100*time.Millisecond),
		core.WithFailurePolicy(core.FailClosed), core.WithBreaker(1, time.Second), core.WithDenyCache(0), core.WithObserver(obs))
	open := testkit.Limiter(t, drv.New(t, srv), p, core.WithTimeout(100*time.Millisecond), core.WithFailurePolicy(core.FailOpen))
	srv.Stop()

	if d, err := open.Wait(context.Background(), "k"); err != nil || !d.Allowed || d.Source != core.SourceOpen {
		t.Errorf("FailOpen Wait(k) with the store down = %+v, %v; want admitted by SourceOpen", d, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := l.Wait(ctx, "k")
	if !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil || !strings.Contains(err.Error(), "FailClosed") {
		t.Errorf("FailClosed Wait(k) with the store down and 500 ms left = %v (context: %v), want a DeadlineExceeded naming FailClosed before the deadline", err, ctx.Err())
	}

	// The store comes back while a caller waits: it is admitted by the store.
	done := make(chan struct{})
	var d core.Decision
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		d, err = l.Wait(ctx, "k")
	}()
	testkit.WaitUntil(t, "a FailClosed refusal", func() bool { return closed.Load() >= 2 })
	srv.Restart()
	<-done
	if err != nil || !d.Allowed || d.Source != core.SourceStore {
		t.Errorf("FailClosed Wait(k) across the outage = %+v, %v; want admitted by the store", d, err)
	}
	t.Logf("%d FailClosed refusals waited out", closed.Load())
}
