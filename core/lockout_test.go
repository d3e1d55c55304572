package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// TestLockoutTiers: the policy's lockout holds in every tier, and a key
// locked out stays so when its tier changes.
func TestLockoutTiers(t *testing.T) {
	p := testkit.NewPlans(map[string]string{"k": "free"})
	l, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{
		Name:    "api",
		Rules:   []core.Rule{{Limit: 1, Window: time.Minute}},
		Lockout: core.Lockout{For: time.Hour},
	}, core.WithTiers(p.Resolve, map[string][]core.Rule{
		"free": {{Limit: 2, Window: time.Minute}},
		"pro":  {{Limit: 100, Window: time.Minute}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 2 {
		if d, _ := l.Allow(ctx, "k"); !d.Allowed {
			t.Fatalf("Allow(k) in free = %+v, want admitted", d)
		}
	}
	if d, _ := l.Allow(ctx, "k"); !d.Locked {
		t.Fatalf("Allow(k) #3 in free (2 a minute) = %+v, want locked out", d)
	}
	p.Set("k", "pro")
	if err := l.InvalidateTier(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if d, _ := l.Allow(ctx, "k"); d.Allowed || !d.Locked || d.Limit != 100 {
		t.Errorf("Allow(k) after moving to pro = %+v, want still locked out (pro's rules, Limit 100)", d)
	}
	if err := l.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if d, _ := l.Allow(ctx, "k"); !d.Allowed {
		t.Errorf("Allow(k) after Reset = %+v, want admitted", d)
	}
}
