package core_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// fill takes every unit of key's smallest limit on l.
func fill(t *testing.T, l *core.Limiter, key string) core.Decision {
	t.Helper()
	var first core.Decision
	for i := range l.Policy().Rules[0].Limit {
		d, err := l.Allow(context.Background(), key)
		if err != nil || !d.Allowed {
			t.Fatalf("Allow(%q) #%d = %+v, %v; want allowed", key, i+1, d, err)
		}
		if i == 0 {
			first = d
		}
	}
	return first
}

// peekUsed returns the units key holds in l's first rule.
func peekUsed(t *testing.T, l *core.Limiter, key string) int64 {
	t.Helper()
	d, err := l.Peek(context.Background(), key)
	if err != nil {
		t.Fatalf("Peek(%q): %v", key, err)
	}
	return d.Rules()[0].Used
}

// TestWaitInvalidCost: a cost that can never fit fails at once, whether or
// not others wait for the key, and so does a done context.
func TestWaitInvalidCost(t *testing.T) {
	for _, f := range testkit.Backends() {
		t.Run(f.Name, func(t *testing.T) {
			t.Parallel()
			l := testkit.Fleet(t, 1, f, core.Policy{Name: "cost", Rules: []core.Rule{{Limit: 3, Window: time.Hour}, {Limit: 5, Window: 24 * time.Hour}}})[0]
			ctx := context.Background()
			for _, n := range []int64{0, -1, 4} {
				if _, err := l.WaitN(ctx, "k", n); !errors.Is(err, core.ErrInvalidCost) {
					t.Errorf("WaitN(k, %d) = %v, want ErrInvalidCost", n, err)
				}
			}
			// Someone waits for k: the cost is still checked first.
			fill(t, l, "k")
			wctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				_, err := l.Wait(wctx, "k")
				done <- err
			}()
			testkit.WaitUntil(t, "the first caller waits", func() bool { return l.Waiting("k") == 1 })
			if _, err := l.WaitN(ctx, "k", 4); !errors.Is(err, core.ErrInvalidCost) {
				t.Errorf("WaitN(k, 4) behind a waiter = %v, want ErrInvalidCost", err)
			}
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("Wait(k) with its context canceled = %v, want context.Canceled", err)
			}
			if n := l.Waiting("k"); n != 0 {
				t.Errorf("%d callers still wait for k, want 0", n)
			}
			if _, err := l.Wait(wctx, "k"); !errors.Is(err, context.Canceled) {
				t.Errorf("Wait with a done context = %v, want context.Canceled", err)
			}
		})
	}
}

// TestWaitAdmitsWhenItFits: a key with room admits at once; a full key
// admits a waiter no earlier than the store's window allows, by the
// store's own decision times.
func TestWaitAdmitsWhenItFits(t *testing.T) {
	const window = 200 * time.Millisecond
	for _, f := range testkit.Backends() {
		t.Run(f.Name, func(t *testing.T) {
			t.Parallel()
			l := testkit.Fleet(t, 1, f, core.Policy{Name: "fits", Rules: []core.Rule{{Limit: 2, Window: window}}})[0]
			ctx := context.Background()
			first, err := l.Wait(ctx, "k")
			if err != nil || !first.Allowed || first.Remaining != 1 || first.Source != core.SourceStore {
				t.Fatalf("Wait(k) on an empty key = %+v, %v; want allowed with 1 remaining by the store", first, err)
			}
			// Half a window later, so that this unit is still in the
			// window when the refund below is checked.
			time.Sleep(window / 2)
			if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed {
				t.Fatalf("Allow(k) = %+v, %v", d, err)
			}
			d, err := l.Wait(ctx, "k")
			if err != nil || !d.Allowed {
				t.Fatalf("Wait(k) on a full key = %+v, %v; want allowed", d, err)
			}
			if gap := time.Duration(core.AdmittedAt(d)-core.AdmittedAt(first)) * time.Microsecond; gap < window {
				t.Errorf("Wait admitted %v after the first unit, want at least the window %v", gap, window)
			} else {
				t.Logf("admitted %v after the first unit (window %v)", gap, window)
			}
			// The refund gives back d's unit, whatever else the window holds.
			before := peekUsed(t, l, "k")
			if err := d.Refund(ctx); err != nil {
				t.Errorf("Refund of a Wait admission: %v", err)
			}
			if after := peekUsed(t, l, "k"); after != before-1 {
				t.Errorf("the window holds %d units after the refund, %d before; want one fewer", after, before)
			}
		})
	}
}

// TestWaitFailsFast: a wait that would end after the context's deadline
// fails at once, for the caller asking the store and for the callers
// queued behind it, with an error wrapping context.DeadlineExceeded; the
// context is not done yet when it returns.
func TestWaitFailsFast(t *testing.T) {
	for _, f := range testkit.Backends() {
		t.Run(f.Name, func(t *testing.T) {
			t.Parallel()
			l := testkit.Fleet(t, 1, f, core.Policy{Name: "fast", Rules: []core.Rule{{Limit: 1, Window: time.Hour}}})[0]
			fill(t, l, "k")
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := l.Wait(ctx, "k")
			if !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil || !strings.Contains(err.Error(), "would exceed the context deadline") {
				t.Fatalf("Wait(k) with an hour to wait and 5 s left = %v (context: %v), want an error wrapping DeadlineExceeded before the deadline", err, ctx.Err())
			}
			t.Logf("first in line: %v", err)

			// Behind a caller without deadline.
			hctx, hcancel := context.WithCancel(context.Background())
			head := make(chan error, 1)
			go func() {
				_, err := l.Wait(hctx, "k")
				head <- err
			}()
			testkit.WaitUntil(t, "the first caller waits", func() bool { return l.Waiting("k") == 1 })
			var wg sync.WaitGroup
			for range 3 {
				wg.Go(func() {
					_, err := l.Wait(ctx, "k")
					if !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
						t.Errorf("Wait(k) behind the first caller = %v (context: %v), want DeadlineExceeded before the deadline", err, ctx.Err())
					}
				})
			}
			wg.Wait()
			if n := l.Waiting("k"); n != 1 {
				t.Errorf("%d callers wait for k, want the first one only", n)
			}
			hcancel()
			if err := <-head; !errors.Is(err, context.Canceled) {
				t.Errorf("first caller: %v, want context.Canceled", err)
			}
		})
	}
}

// TestWaitInOrder: callers queued for a key on one instance are admitted
// in their order of arrival, each a full window after the one before by
// the store's clock.
func TestWaitInOrder(t *testing.T) {
	const (
		window  = 100 * time.Millisecond
		waiters = 5
	)
	for _, f := range testkit.Backends() {
		t.Run(f.Name, func(t *testing.T) {
			t.Parallel()
			l := testkit.Fleet(t, 1, f, core.Policy{Name: "order", Rules: []core.Rule{{Limit: 1, Window: window}}})[0]
			prev := core.AdmittedAt(fill(t, l, "k"))
			ds := make([]core.Decision, waiters)
			var wg sync.WaitGroup
			for i := range waiters {
				wg.Go(func() {
					d, err := l.Wait(context.Background(), "k")
					if err != nil {
						t.Errorf("waiter %d: %v", i, err)
					}
					ds[i] = d
				})
				testkit.WaitUntil(t, fmt.Sprintf("waiter %d queues", i), func() bool { return l.Waiting("k") == i+1 })
			}
			wg.Wait()
			for i, d := range ds {
				at := core.AdmittedAt(d)
				if gap := time.Duration(at-prev) * time.Microsecond; gap < window {
					t.Errorf("waiter %d admitted %v after the admission before it, want its arrival order and at least %v", i, gap, window)
				}
				prev = at
			}
		})
	}
}

// TestWaitNoStampede: many callers waiting for one key on one instance
// make about one store decision per admission, not one per caller per
// freed unit: only the first in line asks.
func TestWaitNoStampede(t *testing.T) {
	// On Redis: internal/test/redissuite's WaitNoStampede.
	testkit.WaitNoStampede(t, testkit.Memory)
}

// admission is one admission of a fleet run.
type admission struct {
	at     int64         // the store's time, µs
	caller int           // who was admitted
	took   time.Duration // how long its Wait took
	passed int64         // admissions fleet-wide while it waited
}

// fleetRun is what TestWaitFleet measures on one store.
type fleetRun struct {
	adm   []admission
	asked int // decisions the limiters made
	fall  int // fallback decisions
}

// TestWaitFleet: instances x goroutines call Wait in a loop on one key of
// 100 per second, as a fleet calling an SMS provider would. Exact: by the
// store's own decision times no window of one second ever holds more than
// 100 admissions. Measured (logged, generous bounds), once the first
// window has passed: how full the window is over time, each caller's
// share, how many admissions passed a caller while it waited, how long a
// Wait took, and store decisions per admission.
func TestWaitFleet(t *testing.T) {
	const (
		limit      = 100
		window     = time.Second
		instances  = 4
		goroutines = 8
		run        = 3500 * time.Millisecond
	)
	for _, f := range testkit.Backends() {
		t.Run(f.Name, func(t *testing.T) {
			obs := &testkit.EventCounts{}
			ls := testkit.Fleet(t, instances, f, core.Policy{Name: "provider", Rules: []core.Rule{{Limit: limit, Window: window}}}, core.WithObserver(obs))
			r := runFleet(t, ls, goroutines, run)
			r.asked, r.fall = obs.Count(core.EventDecision), obs.Fallbacks()
			checkFleet(t, r, limit, window, instances*goroutines)
		})
	}
}

// runFleet runs goroutines callers of Wait per limiter, each calling again
// as soon as it is admitted, until the run's deadline d.
func runFleet(t *testing.T, ls []*core.Limiter, goroutines int, d time.Duration) fleetRun {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var (
		mu       sync.Mutex
		r        fleetRun
		admitted atomic.Int64
		wg       sync.WaitGroup
	)
	start := make(chan struct{})
	for i, l := range ls {
		for j := range goroutines {
			g := i*goroutines + j
			wg.Go(func() {
				<-start
				for {
					began, before := time.Now(), admitted.Load()
					d, err := l.Wait(ctx, "sms-provider")
					if err != nil {
						if !errors.Is(err, context.DeadlineExceeded) {
							t.Errorf("caller %d: Wait = %v, want admissions until the run's deadline", g, err)
						}
						return
					}
					a := admission{at: core.AdmittedAt(d), caller: g, took: time.Since(began), passed: admitted.Add(1) - 1 - before}
					mu.Lock()
					r.adm = append(r.adm, a)
					mu.Unlock()
				}
			})
		}
	}
	close(start)
	wg.Wait()
	return r
}

// checkFleet checks and logs a fleet run on a limit of limit per window
// shared by callers goroutines.
func checkFleet(t *testing.T, r fleetRun, limit int, window time.Duration, callers int) {
	t.Helper()
	if r.fall != 0 {
		t.Fatalf("%d fallback decisions, want 0: the store must decide every one", r.fall)
	}
	adm := slices.Clone(r.adm)
	slices.SortFunc(adm, func(a, b admission) int { return int(a.at - b.at) })
	at := make([]int64, len(adm))
	for i, a := range adm {
		at[i] = a.at
	}
	w := window.Microseconds()
	if len(at) < 2*limit || at[len(at)-1]-at[0] < 2*w {
		t.Fatalf("%d admissions over %v, want more than two windows' worth", len(at), time.Duration(at[len(at)-1]-at[0])*time.Microsecond)
	}
	// Exact: the window (t-w, t] ending at every admission.
	most := 0
	for i := range at {
		most = max(most, inWindow(at, at[i], w))
	}
	if most > limit {
		t.Errorf("a window of %v held %d admissions by the store's clock, want at most %d", window, most, limit)
	}
	// How full the window is, every millisecond once the first has passed.
	steady := at[0] + w
	var samples, sum, least int
	least = limit
	for now := steady; now <= at[len(at)-1]; now += 1000 {
		n := inWindow(at, now, w)
		samples, sum, least = samples+1, sum+n, min(least, n)
	}
	mean := float64(sum) / float64(samples)
	if mean < 0.8*float64(limit) {
		t.Errorf("after the first window the window held %.1f admissions on average, want near %d (at least 80%%)", mean, limit)
	}
	// Fairness once the first window has passed.
	per := make([]int, callers)
	var waits []time.Duration
	var passed int64
	n := 0
	for _, a := range adm {
		if a.at <= steady {
			continue
		}
		n++
		per[a.caller]++
		waits = append(waits, a.took)
		passed = max(passed, a.passed)
	}
	fair := float64(n) / float64(callers)
	least2, most2 := slices.Min(per), slices.Max(per)
	if float64(least2) < fair/3 {
		t.Errorf("a caller got %d admissions after the first window, want at least a third of the fair share %.1f: it starves", least2, fair)
	}
	// A caller that queues again just after its admission may wait out
	// the rest of the window's admissions, then its turn in the next.
	if bound := int64(limit + 4*callers); passed > bound {
		t.Errorf("%d admissions passed a waiting caller, want at most %d (a window's worth and 4 per caller)", passed, bound)
	}
	slices.Sort(waits)
	pct := func(p float64) time.Duration { return waits[int(p*float64(len(waits)-1))].Round(time.Millisecond) }
	t.Logf("%d admissions by %d callers over %v; the most in any %v window: %d (limit %d)",
		len(at), callers, time.Duration(at[len(at)-1]-at[0])*time.Microsecond, window, most, limit)
	t.Logf("after the first window, sampled every ms: the window held %.2f on average (%.2f%% of the limit), %d at least",
		mean, 100*mean/float64(limit), least)
	t.Logf("after the first window: %d admissions, per caller %d..%d (fair share %.1f); admissions passing a waiting caller: at most %d",
		n, least2, most2, fair, passed)
	t.Logf("wait after the first window: p50 %v, p90 %v, p99 %v, max %v", pct(0.5), pct(0.9), pct(0.99), pct(1))
	t.Logf("store decisions: %d, %.2f per admission", r.asked, float64(r.asked)/float64(len(at)))
}

// inWindow returns how many of the sorted times at lie in (now-w, now].
func inWindow(at []int64, now, w int64) int {
	lo, _ := slices.BinarySearch(at, now-w+1)
	hi, _ := slices.BinarySearch(at, now+1)
	return hi - lo
}

// TestWaitInFlight: a concurrency slot has no known wait: a waiter is
// not refused for its deadline on the strength of the 1 s hint, wakes as
// soon as this instance releases a lease, and sees one released on
// another instance within a poll: well before the hint either way (the
// bounds leave room for a loaded machine).
func TestWaitInFlight(t *testing.T) {
	// On Redis: internal/test/redissuite's WaitInFlight.
	testkit.WaitInFlight(t, testkit.Memory)
}
