package testkit

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/driver/drivertest"
)

// The kinds of policy (buckets, shards, calendars, tiers) and refunds,
// on every store.

// SlidingBucketsRetryAfterBound checks on b that under SlidingBuckets a
// denial waits up to one bucket width longer than the window, never more.
// With 60 buckets of a 60 s window, a unit admitted at the start of a
// bucket counts until that whole bucket has left the window: 61 s later.
// A denial then says 61 s (Retry-After: 61), the request is denied 1 µs
// before and admitted at it; in the middle of the bucket the wait is
// shorter.
func SlidingBucketsRetryAfterBound(t *testing.T, b Backend) {
	const window = time.Minute
	clock := drivertest.NewClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)) // on a whole second: a bucket start
	l := Fleet(t, 1, b, core.Policy{
		Name:      "bound-" + b.Name,
		Algorithm: core.SlidingBuckets, // 60 buckets of 1 s
		Rules:     []core.Rule{{Limit: 2, Window: window}},
	}, core.WithDenyCache(0), core.WithClock(clock.Now), core.WithTimeout(5*time.Second))[0]
	ctx := context.Background()
	if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed {
		t.Fatalf("first unit: %+v, %v", d, err)
	}
	clock.Add(500 * time.Millisecond) // the middle of the bucket
	if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed {
		t.Fatalf("second unit: %+v, %v", d, err)
	}
	d, err := l.Allow(ctx, "k")
	if err != nil || d.Allowed {
		t.Fatalf("third unit: %+v, %v; want denied", d, err)
	}
	// The bucket [0 s, 1 s) counts until the window starts at 1 s: at
	// 61 s, 60.5 s from now, although the second unit was admitted 0 s
	// ago.
	if want := window + time.Second - 500*time.Millisecond; d.RetryAfter != want {
		t.Fatalf("RetryAfter in mid-bucket = %v, want %v", d.RetryAfter, want)
	}
	if d2, _ := l.Allow(ctx, "k2"); !d2.Allowed {
		t.Fatal("k2 denied")
	}
	clock.Add(500 * time.Millisecond) // the start of the next bucket
	for range 2 {
		if d, err := l.Allow(ctx, "k3"); err != nil || !d.Allowed {
			t.Fatalf("k3: %+v, %v", d, err)
		}
	}
	d, err = l.Allow(ctx, "k3")
	if err != nil || d.Allowed {
		t.Fatalf("k3 third unit: %+v, %v; want denied", d, err)
	}
	if want := window + time.Second; d.RetryAfter != want {
		t.Fatalf("RetryAfter at a bucket start = %v, want the bound %v (window + window/60)", d.RetryAfter, want)
	}
	clock.Add(d.RetryAfter - time.Microsecond)
	if d, _ := l.Allow(ctx, "k3"); d.Allowed {
		t.Fatal("admitted 1 µs before RetryAfter")
	}
	clock.Add(time.Microsecond)
	if d, _ := l.Allow(ctx, "k3"); !d.Allowed {
		t.Fatalf("denied at RetryAfter: %+v", d)
	}
}

// ShardsNeverOverAdmit checks on b that three app instances flooding one
// sharded key concurrently admit exactly the limit between them.
func ShardsNeverOverAdmit(t *testing.T, b Backend) {
	const (
		limit      = 100
		shards     = 8
		instances  = 3
		goroutines = 16
		each       = 20
	)
	p := core.Policy{Name: "sharded", Rules: []core.Rule{{Limit: limit, Window: time.Minute}}, Shards: shards}
	// A generous timeout: a fallback would decide locally.
	ls := Fleet(t, instances, b, p, core.WithTimeout(5*time.Second))
	var allowed, fallbacks atomic.Int64
	var wg sync.WaitGroup
	for _, l := range ls {
		for range goroutines {
			wg.Go(func() {
				for range each {
					d, err := l.Allow(context.Background(), "hot")
					if err != nil {
						t.Errorf("Allow(hot): %v", err)
						return
					}
					if d.Source.Fallback() {
						fallbacks.Add(1)
					}
					if d.Allowed {
						allowed.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	if got := fallbacks.Load(); got != 0 {
		t.Errorf("%d fallback decisions, want 0", got)
	}
	// 960 requests, 120 per shard: every shard fills, none overflows.
	if got := allowed.Load(); got != limit {
		t.Errorf("%d requests on a key with Limit %d in %d shards: %d allowed, want exactly %d", instances*goroutines*each, limit, shards, got, limit)
	}
}

// CalendarShards checks on b that each shard holds its share of a
// calendar rule, and that together they admit exactly the limit.
func CalendarShards(t *testing.T, b Backend) {
	noon := drivertest.ZoneWithMidnightAt(time.Now().Truncate(time.Second).Add(12 * time.Hour))
	l := Fleet(t, 1, b, core.Policy{Name: "global", Shards: 4,
		Rules: []core.Rule{{Limit: 1000, Window: time.Minute}, {Limit: 30, Calendar: core.Day, Location: noon}}},
		core.WithTimeout(2*time.Second))[0]
	allowed := 0
	for range 60 {
		d, err := l.Allow(context.Background(), "all")
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			allowed++
		}
	}
	if allowed != 30 {
		t.Errorf("%s: 60 Allow with 30 a day over 4 shards: %d allowed, want 30", b.Name, allowed)
	}
}

// CalendarTiers checks on b that a tier carries its customer's time zone:
// a month's rule of a tier in Paris and of one in Tokyo, and the policy's
// own in UTC, each with its period's length and end.
func CalendarTiers(t *testing.T, b Backend) {
	paris, tokyo := drivertest.Zone(t, "Europe/Paris"), drivertest.Zone(t, "Asia/Tokyo")
	// 20:00 UTC on 31 January: 21:00 in Paris, already 1 February in Tokyo.
	clk := drivertest.NewClock(time.Date(2024, 1, 31, 20, 0, 0, 0, time.UTC))
	p := NewPlans(map[string]string{"fr": "pro/Europe/Paris", "jp": "pro/Asia/Tokyo"})
	tiers := map[string][]core.Rule{
		"pro/Europe/Paris": {{Limit: 100, Window: time.Second}, {Limit: 1000, Calendar: core.Month, Location: paris}},
		"pro/Asia/Tokyo":   {{Limit: 100, Window: time.Second}, {Limit: 1000, Calendar: core.Month, Location: tokyo}},
	}
	base := core.Policy{Name: "api", Rules: []core.Rule{{Limit: 10, Window: time.Second}, {Limit: 100, Calendar: core.Month}}}
	l := Fleet(t, 1, b, base, core.WithTiers(p.Resolve, tiers), core.WithClock(clk.Now), core.WithTimeout(2*time.Second))[0]
	for _, tc := range []struct {
		key    string
		limit  int64
		window time.Duration
		reset  time.Duration
	}{
		{"fr", 1000, 31 * 24 * time.Hour, 3 * time.Hour},   // January in Paris ends at 23:00 UTC
		{"jp", 1000, 29 * 24 * time.Hour, 691 * time.Hour}, // February 2024 in Tokyo ends on 29 February, 15:00 UTC
		{"other", 100, 31 * 24 * time.Hour, 4 * time.Hour}, // the policy's own: January in UTC
	} {
		d, err := l.Allow(context.Background(), tc.key)
		if err != nil || !d.Allowed {
			t.Fatalf("Allow(%s) = %+v, %v", tc.key, d, err)
		}
		r := d.Rules()[1]
		if r.Limit != tc.limit || r.Window != tc.window || r.ResetAfter != tc.reset || r.Used != 1 {
			t.Errorf("Allow(%s): Rules[1] = %+v, want Limit %d, Window %v, ResetAfter %v, Used 1", tc.key, r, tc.limit, tc.window, tc.reset)
		}
	}
}

// TiersUsageCarriesOver checks on b that usage counted under one tier is
// seen by the next, both ways, for both algorithms (a subtest each): 200 units used as pro, then free (a smaller
// daily limit) is full, and pro again sees the 200 (issue: a downgrade
// then upgrade must not forget usage).
func TiersUsageCarriesOver(t *testing.T, b Backend) {
	for _, alg := range []core.Algorithm{core.SlidingLog, core.SlidingBuckets} {
		t.Run(alg.String(), func(t *testing.T) {
			p := NewPlans(map[string]string{"k": "pro"})
			day := 24 * time.Hour
			l := Fleet(t, 1, b, core.Policy{Name: "carry-" + alg.String(), Algorithm: alg,
				Rules: []core.Rule{{Limit: 10, Window: time.Minute}, {Limit: 50, Window: day}}},
				core.WithTiers(p.Resolve, map[string][]core.Rule{
					"free": {{Limit: 10, Window: time.Minute}, {Limit: 50, Window: day}},
					"pro":  {{Limit: 1000, Window: time.Minute}, {Limit: 1000, Window: day}},
				}), core.WithTierCache(0, 0), core.WithTimeout(5*time.Second))[0]
			ctx := context.Background()
			if d, err := l.AllowN(ctx, "k", 200); err != nil || !d.Allowed {
				t.Fatalf("pro AllowN(200) = %+v, %v", d, err)
			}
			p.Set("k", "free")
			if d, err := l.Allow(ctx, "k"); err != nil || d.Allowed {
				t.Errorf("free after 200 used as pro: Allow = %+v, %v; want denied (50 a day)", d, err)
			}
			p.Set("k", "pro")
			d, err := l.Peek(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range d.Rules() {
				if r.Used != 200 {
					t.Errorf("pro again: rule %v used %d, want 200 (usage kept through the downgrade)", r.Window, r.Used)
				}
			}
		})
	}
}

// RefundOnce checks on b that a decision's units come back once, however
// often its Refund is called, for both algorithms (a subtest each); and that a refund gives back only the units of
// its own decision, not those of another admitted at the same time.
func RefundOnce(t *testing.T, b Backend) {
	ctx := context.Background()
	for _, alg := range []core.Algorithm{core.SlidingLog, core.SlidingBuckets} {
		t.Run(alg.String(), func(t *testing.T) {
			l := Fleet(t, 1, b, core.Policy{Name: "refund-" + alg.String(), Algorithm: alg, Buckets: 10,
				Rules: []core.Rule{{Limit: 5, Window: time.Minute}}}, core.WithTimeout(5*time.Second))[0]
			var ds []core.Decision
			for i := range 3 {
				d, err := l.Allow(ctx, "k")
				if err != nil || !d.Allowed {
					t.Fatalf("Allow #%d = %+v, %v", i, d, err)
				}
				ds = append(ds, d)
			}
			for range 2 {
				if err := ds[2].Refund(ctx); err != nil {
					t.Fatalf("Refund: %v", err)
				}
			}
			if d, _ := l.Peek(ctx, "k"); d.Remaining != 3 {
				t.Errorf("after refunding one decision twice: Remaining = %d, want 3", d.Remaining)
			}
		})
	}
}
