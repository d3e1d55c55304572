package drivertest

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
)

// policyLimiter returns a limiter for p, named afresh, on a new store,
// with the suite's options before opts.
func (s *suite) policyLimiter(t *testing.T, p core.Policy, opts ...core.Option) (*core.Limiter, *spy) {
	t.Helper()
	st := s.store(t)
	p.Name = s.name()
	l, err := core.NewLimiter(spied(st), p, s.options(opts...)...)
	if err != nil {
		t.Fatalf("NewLimiter(%+v): %v", p, err)
	}
	return l, st
}

// algorithms runs f once per algorithm, as subtests.
func algorithms(t *testing.T, f func(t *testing.T, algo core.Algorithm)) {
	for _, algo := range []core.Algorithm{core.SlidingLog, core.SlidingBuckets} {
		t.Run(algo.String(), func(t *testing.T) { f(t, algo) })
	}
}

// lockoutStart is when the stepped-clock lockout cases begin.
var lockoutStart = time.Date(2024, 1, 10, 12, 0, 0, 0, time.UTC)

// testLockout: a denial locks the key out for Lockout.For, beyond the
// window, whatever the rules hold and whatever the cost, with RetryAfter
// running exactly to the lockout's end; then the key is admitted again.
func testLockout(t *testing.T, s *suite) {
	algorithms(t, func(t *testing.T, algo core.Algorithm) {
		clk := NewClock(lockoutStart)
		l, _ := s.policyLimiter(t, core.Policy{
			Rules:     []core.Rule{{Limit: 3, Window: time.Minute}},
			Algorithm: algo,
			Lockout:   core.Lockout{For: time.Hour},
		}, core.WithClock(clk.Now))
		lockoutBegins(t, l)

		// Past the window (and its buckets) the rule has room, but the key
		// stays locked out for any cost, and a denial during the lockout
		// does not extend it.
		clk.Add(5 * time.Minute)
		lockoutHolds(t, l)

		clk.Add(55*time.Minute - time.Microsecond)
		if d := allow(t, l, "k"); d.Allowed || !d.Locked || d.RetryAfter != time.Microsecond {
			t.Errorf("Allow(k) 1µs before the lockout ends = %s Locked %v, want locked out, RetryAfter 1µs", show(d), d.Locked)
		}
		clk.Add(time.Microsecond)
		if d := allow(t, l, "k"); !d.Allowed || d.Locked || d.Remaining != 2 || d.Source != core.SourceStore {
			t.Errorf("Allow(k) when the lockout ends = %s Locked %v, want allowed by the store, Remaining 2", show(d), d.Locked)
		}
	})
}

// lockoutBegins is the start of testLockout, on l of 3 a minute and an
// hour's lockout: the denial of unit 4 locks k out for the hour, with the
// rule's own state, and other keys are admitted.
func lockoutBegins(t *testing.T, l *core.Limiter) {
	t.Helper()
	for i := range 3 {
		if d := allow(t, l, "k"); !d.Allowed || d.Locked {
			t.Fatalf("Allow(k) #%d = %s, want allowed", i+1, show(d))
		}
	}
	d := allow(t, l, "k")
	if d.Allowed || !d.Locked || d.RetryAfter != time.Hour || d.Remaining != 0 || d.ResetAfter != time.Hour {
		t.Fatalf("Allow(k) #4 over 3 per minute = %s Locked %v, want denied and locked out, RetryAfter and ResetAfter %v, Remaining 0",
			show(d), d.Locked, time.Hour)
	}
	if r := d.Rules()[0]; r.Used != 3 || r.RetryAfter <= 0 || r.RetryAfter > 2*time.Minute {
		t.Errorf("Allow(k) #4: Rules[0] = %+v, want the rule's own state: Used 3, RetryAfter about the window", r)
	}
	if d := allow(t, l, "other"); !d.Allowed {
		t.Errorf("Allow(other) while k is locked out = %s, want allowed", show(d))
	}
}

// lockoutHolds is testLockout 5 minutes into the lockout: k stays locked
// out for any cost, for the 55 minutes left, and Peek says so.
func lockoutHolds(t *testing.T, l *core.Limiter) {
	t.Helper()
	for _, n := range []int64{1, 2, 1} {
		d := allowN(t, l, "k", n)
		if d.Allowed || !d.Locked || d.RetryAfter != 55*time.Minute || d.Remaining != 0 {
			t.Fatalf("AllowN(k, %d) 5m into the lockout = %s Locked %v, want locked out, RetryAfter 55m, Remaining 0", n, show(d), d.Locked)
		}
		// A denial cached since the lockout began keeps the counts it
		// saw; the store's answer shows the window as it is.
		if r := d.Rules()[0]; d.Source == core.SourceStore && (r.Used != 0 || r.RetryAfter != 0) {
			t.Errorf("AllowN(k, %d) 5m into the lockout: Rules[0] = %+v, want the empty window (Used 0, no RetryAfter)", n, r)
		}
	}
	p := peek(t, l, "k")
	if p.Allowed || !p.Locked || p.RetryAfter != 55*time.Minute || p.Rules()[0].Used != 0 {
		t.Errorf("Peek(k) 5m into the lockout = %s Locked %v, Used %d; want locked out, RetryAfter 55m, Used 0", show(p), p.Locked, p.Rules()[0].Used)
	}
}

// testLockoutGrowth: with Max above For, each repeat offence locks twice
// as long, up to Max; offences are forgotten Max after the last lockout
// ended.
func testLockoutGrowth(t *testing.T, s *suite) {
	algorithms(t, func(t *testing.T, algo core.Algorithm) {
		clk := NewClock(lockoutStart)
		l, _ := s.policyLimiter(t, core.Policy{
			Rules:     []core.Rule{{Limit: 1, Window: time.Second}},
			Algorithm: algo,
			Lockout:   core.Lockout{For: time.Minute, Max: 5 * time.Minute},
		}, core.WithClock(clk.Now))
		offend := func(want time.Duration) {
			t.Helper()
			if d := allow(t, l, "k"); !d.Allowed {
				t.Fatalf("Allow(k) after the lockout = %s, want allowed", show(d))
			}
			d := allow(t, l, "k")
			if d.Allowed || !d.Locked || d.RetryAfter != want {
				t.Fatalf("Allow(k) over 1 per second = %s Locked %v, want locked out for %v", show(d), d.Locked, want)
			}
			clk.Add(want)
		}
		for _, want := range []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 5 * time.Minute, 5 * time.Minute} {
			offend(want)
		}
		// Just short of Max without a lockout: the offences still count.
		clk.Add(5*time.Minute - time.Second)
		offend(5 * time.Minute)
		// Max without a lockout: forgotten.
		clk.Add(5 * time.Minute)
		offend(time.Minute)
		offend(2 * time.Minute)
	})
}

// testLockoutServerTime: the lockout on the store's own clock (or the
// suite's), in real time: RetryAfter is exact at the denial that starts
// it, and the key is admitted once it has passed.
func testLockoutServerTime(t *testing.T, s *suite) {
	const (
		window = 50 * time.Millisecond
		lock   = 400 * time.Millisecond
	)
	l, _ := s.policyLimiter(t, core.Policy{
		Rules:   []core.Rule{{Limit: 1, Window: window}},
		Lockout: core.Lockout{For: lock},
	})
	retryTiming(t, func(key string) bool {
		allow(t, l, key)
		b := time.Now()
		d := allow(t, l, key)
		if d.Allowed {
			return false // stalled past the window
		}
		if !d.Locked || d.RetryAfter != lock {
			t.Fatalf("Allow(%s) #2 = %s Locked %v, want locked out, RetryAfter exactly %v", key, show(d), d.Locked, lock)
		}
		// Past the window, still locked out, for less.
		time.Sleep(window + 10*time.Millisecond)
		d = allow(t, l, key)
		if elapsed := time.Since(b); elapsed >= lock {
			return false
		}
		if d.Allowed || !d.Locked || d.RetryAfter >= lock-window || d.RetryAfter <= 0 {
			t.Fatalf("Allow(%s) past the window = %s Locked %v, want locked out, RetryAfter in (0, %v)", key, show(d), d.Locked, lock-window)
		}
		// A denial the deny cache answers dates the lockout from when
		// the call that found it was sent: its RetryAfter may be short by
		// that call's time in flight, some milliseconds on a loaded
		// machine (never long: the cache then asks the store).
		time.Sleep(d.RetryAfter + 30*time.Millisecond)
		if d := allow(t, l, key); !d.Allowed || d.Locked {
			t.Fatalf("Allow(%s) after RetryAfter = %s, want allowed", key, show(d))
		}
		return true
	})
}

// testLockoutConcurrent: concurrent requests on a lockout policy admit
// exactly the limit; every other one is denied and locked out, and the
// lockout is the one the first denial started.
func testLockoutConcurrent(t *testing.T, s *suite) {
	const (
		limit      = 50
		goroutines = 16
		each       = 8
	)
	st := s.store(t)
	p := core.Policy{Name: s.name(), Rules: []core.Rule{{Limit: limit, Window: time.Minute}}, Lockout: core.Lockout{For: time.Hour}}
	// Two instances on one store.
	ls := instances(t, s, st, p, 2)
	var locked atomic.Int64
	begin := time.Now()
	allowed := hammer(t, ls, goroutines, each, func(d core.Decision) {
		// A cached denial counts its age from before the store call
		// that made it: up to a call's latency shorter. On a client
		// clock (WithClock) a decision may reach the store after a
		// later-timed one that began the lockout: up to the test's time
		// longer.
		if d.Locked && d.RetryAfter > time.Hour-time.Since(begin)-time.Second && d.RetryAfter <= time.Hour+time.Since(begin) {
			locked.Add(1)
		} else {
			t.Errorf("Allow(k) = %s Locked %v, want allowed or locked out for up to an hour", show(d), d.Locked)
		}
	})
	if allowed != limit {
		t.Errorf("%d x %d Allow(k) with Limit %d: %d allowed, want exactly %d", goroutines, each, limit, allowed, limit)
	}
	if got := locked.Load(); got != goroutines*each-limit {
		t.Errorf("%d denied and locked out, want %d", got, goroutines*each-limit)
	}
	for i, l := range ls {
		if d := peek(t, l, "k"); !d.Locked || d.RetryAfter > time.Hour || d.RetryAfter < time.Hour-time.Since(begin)-slack {
			t.Errorf("instance %d: Peek(k) = %s Locked %v, want locked out for up to an hour", i, show(d), d.Locked)
		}
	}
}

// testLockoutPeekRefundReset: a Peek of a full key starts no lockout, a
// refund does not lift one, Reset does (on every instance).
func testLockoutPeekRefundReset(t *testing.T, s *suite) {
	clk := NewClock(lockoutStart)
	st := s.store(t)
	p := core.Policy{Name: s.name(), Rules: []core.Rule{{Limit: 2, Window: time.Minute}}, Lockout: core.Lockout{For: time.Hour}}
	a, err := core.NewLimiter(spied(st), p, s.options(core.WithClock(clk.Now))...)
	if err != nil {
		t.Fatal(err)
	}
	b, err := core.NewLimiter(spied(st), p, s.options(core.WithClock(clk.Now))...)
	if err != nil {
		t.Fatal(err)
	}
	first := allow(t, a, "k")
	allow(t, a, "k")
	for range 3 {
		if d := peek(t, a, "k"); d.Allowed || d.Locked {
			t.Fatalf("Peek(k) on a full key = %s Locked %v, want denied by the rule, not locked out", show(d), d.Locked)
		}
	}
	clk.Add(time.Minute)
	if d := allow(t, b, "k"); !d.Allowed {
		t.Fatalf("Allow(k) on B once the window passed = %s, want allowed (peeks start no lockout)", show(d))
	}
	allow(t, b, "k")
	if d := allow(t, b, "k"); !d.Locked {
		t.Fatalf("Allow(k) #3 on B = %s, want locked out", show(d))
	}
	// The lockout is in the store: A sees it too, and caches it.
	for range 2 {
		if d := allow(t, a, "k"); !d.Locked || d.RetryAfter != time.Hour {
			t.Fatalf("Allow(k) on A = %s Locked %v, want locked out for an hour", show(d), d.Locked)
		}
	}
	lockoutRefundReset(t, a, b, first)
}

// lockoutRefundReset is the end of testLockoutPeekRefundReset, with k
// locked out in the store that a and b share: refunding first, an old
// unit, frees room, not the key; a's Reset lifts the lockout.
func lockoutRefundReset(t *testing.T, a, b *core.Limiter, first core.Decision) {
	t.Helper()
	// Giving back an old unit frees room, not the key.
	if err := first.Refund(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if d := allow(t, a, "k"); !d.Locked {
		t.Errorf("Allow(k) on A after a refund = %s, want still locked out", show(d))
	}
	// Reset lifts it in the store and in the resetting instance's deny
	// cache. (Other instances hear of it through the store: the Redis drivers
	// publishes resets, see the core tests.)
	if err := a.Reset(ctx(t), "k"); err != nil {
		t.Fatal(err)
	}
	if d := allow(t, a, "k"); !d.Allowed || d.Locked || d.Source != core.SourceStore || d.Remaining != 1 {
		t.Errorf("Allow(k) on A after Reset = %s Locked %v, want allowed by the store, Remaining 1", show(d), d.Locked)
	}
	if d := peek(t, b, "k"); d.Locked || d.Rules()[0].Used != 1 {
		t.Errorf("Peek(k) on B after Reset = %s Locked %v, want not locked, Used 1", show(d), d.Locked)
	}
}
