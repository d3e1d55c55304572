package redissuite

import (
	"context"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// testRedisTierInvalidationAcrossInstances: two instances share a Redis
// and cache tiers for an hour. A key's plan changes and one instance
// calls InvalidateTier: the other applies the new plan at once (within a
// pub/sub round trip), where before the call it kept the cached old one.
func testRedisTierInvalidationAcrossInstances(t *testing.T, drv Driver) {
	srv := redistest.Start(t)
	p := testkit.NewPlans(map[string]string{"k": "free"})
	newInstance := func() *core.Limiter {
		l, err := core.NewLimiter(drv.New(t, srv), core.Policy{
			Name:  "api",
			Rules: []core.Rule{{Limit: 1, Window: time.Minute}},
		}, core.WithTiers(p.Resolve, map[string][]core.Rule{
			"free": {{Limit: 3, Window: time.Minute}},
			"pro":  {{Limit: 10, Window: time.Minute}},
		}), core.WithTierCache(100, time.Hour), core.WithTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	a, b := newInstance(), newInstance()
	ctx := context.Background()
	// Each instance forgets its cached tiers when its subscription starts;
	// wait for it: its deny cache answers only from then on.
	for _, l := range []*core.Limiter{a, b} {
		deadline := time.Now().Add(5 * time.Second)
		for {
			d, err := l.Allow(ctx, "warm-up") // no tier: the policy's limit 1
			if err != nil {
				t.Fatal(err)
			}
			if d.Source == core.SourceCache {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("an instance never subscribed to invalidations")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	for range 3 {
		if d, err := a.Allow(ctx, "k"); err != nil || !d.Allowed {
			t.Fatalf("A: free request = %+v, %v", d, err)
		}
	}
	if d, err := b.Allow(ctx, "k"); err != nil || d.Allowed || d.Limit != 3 {
		t.Fatalf("B: 4th free request = %+v, %v; want denied by the free limit 3", d, err)
	}
	p.Set("k", "pro")
	if d, _ := b.Peek(ctx, "k"); d.Limit != 3 {
		t.Fatalf("B before the invalidation: Limit %d, want 3 (its cached tier)", d.Limit)
	}
	if err := a.InvalidateTier(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for {
		d, err := b.Allow(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			if d.Limit != 10 || d.Remaining != 6 {
				t.Errorf("B after the upgrade: %+v, want Limit 10, Remaining 6 (usage carried over)", d)
			}
			t.Logf("B applies the new tier %v after A's InvalidateTier", time.Since(start).Round(time.Millisecond))
			break
		}
		if time.Since(start) > 2*time.Second {
			t.Fatalf("B still applies the old tier 2 s after A's InvalidateTier: %+v", d)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
