package core_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/driver/drivertest"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

func TestMemoryStore(t *testing.T) {
	drivertest.Run(t, func(t *testing.T) core.Store { return core.NewMemoryStore() })
}

// newTestClock returns a clock tests move by hand.
func newTestClock() *drivertest.Clock {
	return drivertest.NewClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
}

// step is one request at a time offset on a fake clock, with the decision
// it must get.
type step struct {
	at            time.Duration
	n             int64
	wantAllowed   bool
	wantRemaining int64
	wantRetry     time.Duration
	wantReset     time.Duration
	wantRule      int
}

// runSteps runs steps through a limiter for rules on a MemoryStore with a
// fake clock, x/time/rate style: time is an argument, so every value is
// exact.
func runSteps(t *testing.T, rules []core.Rule, steps []step) {
	t.Helper()
	clock := newTestClock()
	start := clock.Now()
	l, err := core.NewLimiter(core.NewMemoryStore(),
		core.Policy{Name: "p", Rules: rules}, core.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range steps {
		clock.Set(start.Add(s.at))
		d, err := l.AllowN(context.Background(), "k", s.n)
		if err != nil {
			t.Fatalf("step %d: AllowN(k, %d) at %v: %v", i, s.n, s.at, err)
		}
		if d.Allowed != s.wantAllowed || d.Remaining != s.wantRemaining || d.RetryAfter != s.wantRetry ||
			d.ResetAfter != s.wantReset || d.Rule != s.wantRule || d.Source != core.SourceStore {
			t.Errorf("step %d: AllowN(k, %d) at %v = {Allowed:%v Remaining:%d RetryAfter:%v ResetAfter:%v Rule:%d Source:%v}, "+
				"want {Allowed:%v Remaining:%d RetryAfter:%v ResetAfter:%v Rule:%d Source:store}",
				i, s.n, s.at, d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter, d.Rule, d.Source,
				s.wantAllowed, s.wantRemaining, s.wantRetry, s.wantReset, s.wantRule)
		}
	}
}

func TestMemoryExactWindow(t *testing.T) {
	const (
		s  = time.Second
		us = time.Microsecond
	)
	for _, tc := range []struct {
		name  string
		rules []core.Rule
		steps []step
	}{
		{
			name:  "3 per 10s",
			rules: []core.Rule{{Limit: 3, Window: 10 * s}},
			steps: []step{
				{at: 0, n: 1, wantAllowed: true, wantRemaining: 2, wantReset: 10 * s},
				{at: 1 * s, n: 1, wantAllowed: true, wantRemaining: 1, wantReset: 10 * s},
				{at: 2 * s, n: 1, wantAllowed: true, wantRemaining: 0, wantReset: 10 * s},
				// Full: the unit of 0s leaves at 10s, the newest at 12s.
				{at: 3 * s, n: 1, wantRemaining: 0, wantRetry: 7 * s, wantReset: 9 * s},
				// 2 units need the one of 1s gone too.
				{at: 3 * s, n: 2, wantRemaining: 0, wantRetry: 8 * s, wantReset: 9 * s},
				{at: 3 * s, n: 3, wantRemaining: 0, wantRetry: 9 * s, wantReset: 9 * s},
				// One microsecond before the boundary.
				{at: 10*s - us, n: 1, wantRemaining: 0, wantRetry: us, wantReset: 2*s + us},
				// At the boundary the unit of 0s is out: (now-window, now].
				{at: 10 * s, n: 1, wantAllowed: true, wantRemaining: 0, wantReset: 10 * s},
				{at: 10 * s, n: 1, wantRemaining: 0, wantRetry: 1 * s, wantReset: 10 * s},
				{at: 11 * s, n: 1, wantAllowed: true, wantRemaining: 0, wantReset: 10 * s},
				// Everything gone.
				{at: 30 * s, n: 3, wantAllowed: true, wantRemaining: 0, wantReset: 10 * s},
			},
		},
		{
			name:  "same microsecond",
			rules: []core.Rule{{Limit: 4, Window: s}},
			steps: []step{
				{at: 0, n: 1, wantAllowed: true, wantRemaining: 3, wantReset: s},
				{at: 0, n: 2, wantAllowed: true, wantRemaining: 1, wantReset: s},
				{at: 0, n: 2, wantRemaining: 1, wantRetry: s, wantReset: s},
				{at: 0, n: 1, wantAllowed: true, wantRemaining: 0, wantReset: s},
				{at: s / 2, n: 1, wantRemaining: 0, wantRetry: s / 2, wantReset: s / 2},
				{at: s, n: 4, wantAllowed: true, wantRemaining: 0, wantReset: s},
			},
		},
		{
			// SMS: 1 per minute, 5 per hour. Rule 0 binds at first, then
			// the hour once it is used up.
			name:  "sms 1/min + 5/h",
			rules: []core.Rule{{Limit: 1, Window: time.Minute}, {Limit: 5, Window: time.Hour}},
			steps: []step{
				{at: 0, n: 1, wantAllowed: true, wantRemaining: 0, wantReset: time.Minute},
				{at: 30 * s, n: 1, wantRemaining: 0, wantRetry: 30 * s, wantReset: 30 * s},
				{at: 1 * time.Minute, n: 1, wantAllowed: true, wantRemaining: 0, wantReset: time.Minute},
				{at: 2 * time.Minute, n: 1, wantAllowed: true, wantRemaining: 0, wantReset: time.Minute},
				{at: 3 * time.Minute, n: 1, wantAllowed: true, wantRemaining: 0, wantReset: time.Minute},
				// The 5th unit uses up the hour: both rules have 0 left;
				// the hour empties last and binds.
				{at: 4 * time.Minute, n: 1, wantAllowed: true, wantRemaining: 0, wantReset: time.Hour, wantRule: 1},
				// Both violated: the minute frees at 5 min, the hour at
				// 60 min and binds.
				{at: 4*time.Minute + 30*s, n: 1, wantRemaining: 0, wantRetry: 55*time.Minute + 30*s, wantReset: 59*time.Minute + 30*s, wantRule: 1},
				// The minute rule has room again, the hour does not.
				{at: 10 * time.Minute, n: 1, wantRemaining: 0, wantRetry: 50 * time.Minute, wantReset: 54 * time.Minute, wantRule: 1},
				// The unit of 0 min has left the hour.
				{at: 60*time.Minute + 30*s, n: 1, wantAllowed: true, wantRemaining: 0, wantReset: time.Hour, wantRule: 1},
				// Both violated: the hour frees at 61 min (the unit of
				// 1 min), the minute at 61.5 min and binds.
				{at: 60*time.Minute + 40*s, n: 1, wantRemaining: 0, wantRetry: 50 * s, wantReset: 50 * s, wantRule: 0},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runSteps(t, tc.rules, tc.steps)
		})
	}
}

func TestMemoryRefundExact(t *testing.T) {
	clock := newTestClock()
	l, err := core.NewLimiter(core.NewMemoryStore(),
		core.Policy{Name: "p", Rules: []core.Rule{{Limit: 3, Window: time.Second}}}, core.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Two decisions at the same microsecond share one log entry: refunding
	// one gives back its units only.
	d1, _ := l.AllowN(ctx, "k", 2)
	d2, _ := l.Allow(ctx, "k")
	if !d1.Allowed || !d2.Allowed || d2.Remaining != 0 {
		t.Fatalf("AllowN(k, 2), Allow(k) = %+v, %+v; want both allowed", d1, d2)
	}
	if err := d1.Refund(ctx); err != nil {
		t.Fatal(err)
	}
	d, _ := l.Peek(ctx, "k")
	if d.Remaining != 2 || d.Rules()[0].Used != 1 {
		t.Errorf("Peek after refunding AllowN(k, 2) = %+v, want Used 1, Remaining 2", d)
	}
	// A refund after the units left the window gives nothing of the new
	// units back.
	clock.Add(2 * time.Second)
	d, _ = l.AllowN(ctx, "k", 3)
	if !d.Allowed {
		t.Errorf("AllowN(k, 3) after the window = %+v, want allowed", d)
	}
	if err := d2.Refund(ctx); err != nil {
		t.Fatal(err)
	}
	if d, _ := l.Peek(ctx, "k"); d.Rules()[0].Used != 3 {
		t.Errorf("Peek after a stale refund: Used %d, want 3 (nothing of the new units given back)", d.Rules()[0].Used)
	}
}

// TestMemorySweepIdleKeys checks that keys whose windows have passed leave
// the store as it keeps being used, without a goroutine.
func TestMemorySweepIdleKeys(t *testing.T) {
	const (
		idle = 10000
		// Enough busy keys that traffic reaches every shard of the store:
		// keys are swept by the traffic of their own shard.
		busy = 4096
	)
	clock := newTestClock()
	store := core.NewMemoryStore()
	ctx := context.Background()
	short, err := core.NewLimiter(store, core.Policy{Name: "short", Rules: []core.Rule{{Limit: 1, Window: time.Second}}}, core.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	long, err := core.NewLimiter(store, core.Policy{Name: "long", Rules: []core.Rule{{Limit: 100_000, Window: time.Minute}}}, core.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	for i := range idle {
		if d, err := short.Allow(ctx, fmt.Sprintf("idle-%d", i)); err != nil || !d.Allowed {
			t.Fatalf("Allow(idle-%d) = %+v, %v", i, d, err)
		}
	}
	if got := core.MemoryLen(store); got != idle {
		t.Fatalf("Len() after %d keys = %d, want %d", idle, got, idle)
	}
	clock.Add(2 * time.Second)
	keys := make([]string, busy)
	for i := range keys {
		keys[i] = fmt.Sprintf("busy-%d", i)
	}
	ops := 0
	for ops < 50*busy && core.MemoryLen(store) > busy {
		for _, k := range keys {
			if _, err := long.Allow(ctx, k); err != nil {
				t.Fatal(err)
			}
		}
		ops += busy
	}
	if got := core.MemoryLen(store); got != busy {
		t.Fatalf("Len() after %d operations on %d busy keys = %d, want %d (the %d idle keys swept)", ops, busy, got, busy, idle)
	}
	t.Logf("%d idle keys swept within %d operations on %d busy keys", idle, ops, busy)
	// The busy keys keep their units.
	if d, _ := long.Peek(ctx, "busy-0"); d.Rules()[0].Used != int64(ops/busy) {
		t.Errorf("Peek(busy-0): Used %d, want %d", d.Rules()[0].Used, ops/busy)
	}
}

// TestMemoryBoundedByLiveKeys checks the store's memory under a stream of
// keys seen once each (rotating client addresses): it must stay bounded by
// the keys live within their window, not grow with every key ever seen.
func TestMemoryBoundedByLiveKeys(t *testing.T) {
	const (
		ops    = 100_000
		tick   = 10 * time.Microsecond
		window = time.Millisecond
		live   = int(window / tick) // keys within their window at any time
		bound  = 2000
	)
	clock := newTestClock()
	store := core.NewMemoryStore()
	l, err := core.NewLimiter(store, core.Policy{Name: "p", Rules: []core.Rule{{Limit: 1, Window: window}}}, core.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	peak := 0
	for i := range ops {
		clock.Add(tick)
		if d, err := l.Allow(ctx, fmt.Sprintf("client-%d", i)); err != nil || !d.Allowed {
			t.Fatalf("Allow(client-%d) = %+v, %v", i, d, err)
		}
		if i%1000 == 0 {
			peak = max(peak, core.MemoryLen(store))
		}
	}
	peak = max(peak, core.MemoryLen(store))
	t.Logf("%d one-off keys, %d live at a time: peak Len() %d", ops, live, peak)
	if peak > bound {
		t.Errorf("peak Len() = %d over %d one-off keys with %d live at a time, want at most %d", peak, ops, live, bound)
	}
}

// TestMemoryHammerOneKey: 256 goroutines on one key admit exactly the
// limit.
func TestMemoryHammerOneKey(t *testing.T) {
	const (
		limit      = 1000
		goroutines = 256
		each       = 8
	)
	l, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{Name: "p", Rules: []core.Rule{{Limit: limit, Window: 30 * time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	var allowed atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range goroutines {
		wg.Go(func() {
			<-start
			for range each {
				d, err := l.Allow(context.Background(), "k")
				if err != nil {
					t.Errorf("Allow(k): %v", err)
					return
				}
				if d.Allowed {
					allowed.Add(1)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if got := allowed.Load(); got != limit {
		t.Errorf("%d goroutines x %d Allow(k) with Limit %d: %d allowed, want exactly %d", goroutines, each, limit, got, limit)
	}
}

// TestMemoryBounded: a store never holds more than WithMaxKeys keys,
// forgetting the least recently used first; and idle keys of a policy
// that sees no more traffic are swept within a bounded number of
// operations on another.
func TestMemoryBounded(t *testing.T) {
	ctx := context.Background()
	t.Run("max keys", func(t *testing.T) {
		store := core.NewMemoryStore(core.WithMaxKeys(1000))
		l := testkit.Limiter(t, store, core.Policy{Name: "flood", Rules: []core.Rule{{Limit: 1, Window: time.Hour}}})
		hot := "hot"
		for i := range 20000 {
			if i%10 == 0 {
				_, _ = l.Allow(ctx, hot) // used often: never the least recently used
			}
			if _, err := l.Allow(ctx, "k"+strconv.Itoa(i)); err != nil {
				t.Fatal(err)
			}
			if n := core.MemoryLen(store); n > 1000+memShardsSlack {
				t.Fatalf("after %d keys the store holds %d, want at most about 1000", i+1, n)
			}
		}
		if d, _ := l.Allow(ctx, hot); d.Allowed {
			t.Errorf("the often-used key was forgotten: Allow(hot) = %+v, want still denied", d)
		}
	})
	t.Run("idle keys swept", func(t *testing.T) {
		clock := newTestClock()
		store := core.NewMemoryStore()
		idle := testkit.Limiter(t, store, core.Policy{Name: "idle", Rules: []core.Rule{{Limit: 1, Window: time.Second}}}, core.WithClock(clock.Now))
		busy := testkit.Limiter(t, store, core.Policy{Name: "busy", Rules: []core.Rule{{Limit: 100_000, Window: time.Second}}}, core.WithClock(clock.Now))
		const keys = 20000
		for i := range keys {
			_, _ = idle.Allow(ctx, "k"+strconv.Itoa(i))
		}
		clock.Add(2 * time.Second)
		ops := 0
		for core.MemoryLen(store) > 10 && ops < keys {
			_, _ = busy.Allow(ctx, "b")
			ops++
		}
		t.Logf("%d idle keys swept in %d operations on another policy", keys, ops)
		if n := core.MemoryLen(store); n > 10 {
			t.Errorf("%d of %d idle keys left after %d operations, want them swept within about keys/4", n, keys, ops)
		}
	})
}

// TestMemoryEvictionFair: a flood of keys in one policy of a shared
// store is paid for by that policy: another policy's window holds, and no
// flood lifts a lockout before it ends (issue 20 item 6).
func TestMemoryEvictionFair(t *testing.T) {
	ctx := context.Background()
	t.Run("other policies keep their windows", func(t *testing.T) {
		store := core.NewMemoryStore(core.WithMaxKeys(2000))
		sms := testkit.Limiter(t, store, core.Policy{Name: "fair-sms-phone", Rules: []core.Rule{{Limit: 5, Window: time.Hour}}})
		login := testkit.Limiter(t, store, core.Policy{Name: "fair-login-ip", Rules: []core.Rule{{Limit: 1, Window: time.Hour}}})
		for i := range 2000 {
			if _, err := sms.Allow(ctx, "+4420"+strconv.Itoa(7000000+i)); err != nil {
				t.Fatal(err)
			}
		}
		if d, err := login.Allow(ctx, "198.51.100.7"); err != nil || !d.Allowed {
			t.Fatalf("victim's first request = %+v, %v; want allowed", d, err)
		}
		for i := range 200 {
			if _, err := login.Allow(ctx, "203.0.113."+strconv.Itoa(i)); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 2000 { // the flood goes on
			_, _ = sms.Allow(ctx, "+4421"+strconv.Itoa(7000000+i))
		}
		if d, _ := login.Allow(ctx, "198.51.100.7"); d.Allowed {
			t.Errorf("victim's second request inside the hour = %+v, want denied: the sms flood made login-ip forget it", d)
		}
		for i := range 200 {
			if d, _ := login.Allow(ctx, "203.0.113."+strconv.Itoa(i)); d.Allowed {
				t.Fatalf("login-ip client %d's second request was admitted: its window was forgotten", i)
			}
		}
		if n := core.MemoryLen(store); n > 2000+memShardsSlack {
			t.Errorf("the store holds %d keys, want at most about 2000", n)
		}
	})
	t.Run("a lockout holds", func(t *testing.T) {
		store := core.NewMemoryStore(core.WithMaxKeys(500))
		l := testkit.Limiter(t, store, core.Policy{Name: "fair-login-account", Rules: []core.Rule{{Limit: 3, Window: time.Hour}},
			Lockout: core.Lockout{For: 24 * time.Hour}})
		for range 4 {
			_, _ = l.Allow(ctx, "alice")
		}
		if d, _ := l.Peek(ctx, "alice"); !d.Locked {
			t.Fatalf("alice after 4 requests = %+v, want locked out", d)
		}
		for i := range 2000 {
			if _, err := l.Allow(ctx, "user"+strconv.Itoa(i)); err != nil {
				t.Fatal(err)
			}
		}
		if d, _ := l.Allow(ctx, "alice"); d.Allowed || !d.Locked {
			t.Errorf("alice after 2,000 requests for other accounts = %+v, want still locked out", d)
		}
		if n := core.MemoryLen(store); n > 500+memShardsSlack {
			t.Errorf("the store holds %d keys, want at most about 500", n)
		}
	})
	t.Run("locked-out keys are bounded too", func(t *testing.T) {
		store := core.NewMemoryStore(core.WithMaxKeys(100))
		l := testkit.Limiter(t, store, core.Policy{Name: "fair-lock-flood", Rules: []core.Rule{{Limit: 1, Window: time.Hour}},
			Lockout: core.Lockout{For: time.Hour}})
		for i := range 1000 {
			k := "acct" + strconv.Itoa(i)
			_, _ = l.Allow(ctx, k)
			_, _ = l.Allow(ctx, k) // locked out
			if n := core.MemoryLen(store); n > 2*100+memShardsSlack {
				t.Fatalf("after %d locked-out keys the store holds %d, want at most about twice its bound", i+1, n)
			}
		}
	})
}

// memShardsSlack is how far over its bound a store may briefly be: a new
// key in an empty shard makes no room until that shard has keys.
const memShardsSlack = 64

// TestMemoryReusedLogsStartEmpty: the memory of a removed key (reset, or
// swept) is reused by new keys, and a new key finds none of the old one's
// admissions, buckets or lockout.
func TestMemoryReusedLogsStartEmpty(t *testing.T) {
	const keys = 500
	for _, algo := range []core.Algorithm{core.SlidingLog, core.SlidingBuckets} {
		t.Run(algo.String(), func(t *testing.T) {
			l, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{Name: "reuse", Algorithm: algo,
				Rules: []core.Rule{{Limit: 3, Window: time.Minute}}, Lockout: core.Lockout{For: time.Hour}})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for i := range keys {
				old := fmt.Sprintf("old-%d", i)
				for range 4 { // 3 admitted, the 4th locks the key out
					if _, err := l.Allow(ctx, old); err != nil {
						t.Fatal(err)
					}
				}
				if d, _ := l.Peek(ctx, old); !d.Locked {
					t.Fatalf("Peek(%s) after 4 requests = %+v, want locked", old, d)
				}
				if err := l.Reset(ctx, old); err != nil {
					t.Fatal(err)
				}
			}
			for i := range keys {
				for j := range int64(3) {
					d, err := l.Allow(ctx, fmt.Sprintf("new-%d", i))
					if err != nil || !d.Allowed || d.Locked || d.Remaining != 2-j || d.Rules()[0].Used != j+1 {
						t.Fatalf("Allow(new-%d) #%d = %+v, %v; want allowed, Remaining %d, Used %d: a fresh key",
							i, j+1, d, err, 2-j, j+1)
					}
				}
			}
		})
	}
}
