package core_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// TestChallengeFleet: Limit 5 and Challenge 3 on two instances sharing a
// store (Redis; on memory, the one limiter of a process). Requests 1 and
// 2 are admitted; then 8 goroutines × 4 requests over both instances are
// all challenged and record nothing; after a pass on one instance the same
// flood admits exactly 3 (the 3rd to 5th units) and denies every other
// one, none challenged; Reset on one instance clears the pass and the
// counts for both.
func TestChallengeFleet(t *testing.T) {
	// On Redis, two instances each on a store of its own: internal/test/redissuite's ChallengeFleet.
	testkit.ChallengeFleet(t, testkit.Memory)
}

// TestChallengeConfig: Pass on a policy without a Challenge, tiers that
// disagree on having one, and a pass that follows the key's tier.
func TestChallengeConfig(t *testing.T) {
	ctx := context.Background()
	plain := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("plain", testkit.PerHour(5)))
	if err := plain.Pass(ctx, "k"); !errors.Is(err, core.ErrInvalidPolicy) || !strings.Contains(err.Error(), "Challenge") {
		t.Errorf("Pass on a policy without a Challenge = %v, want ErrInvalidPolicy naming Challenge", err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	chal := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "c", Rules: []core.Rule{{Limit: 5, Window: time.Hour, Challenge: 1}}})
	if err := chal.Pass(canceled, "k"); !errors.Is(err, context.Canceled) {
		t.Errorf("Pass with a canceled context = %v, want context.Canceled", err)
	}

	p := testkit.NewPlans(map[string]string{"k": "free"})
	_, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{Name: "api", Rules: []core.Rule{{Limit: 5, Window: time.Hour, Challenge: 2}}},
		core.WithTiers(p.Resolve, map[string][]core.Rule{"pro": {{Limit: 50, Window: time.Hour}}}))
	if !errors.Is(err, core.ErrInvalidPolicy) || !strings.Contains(err.Error(), `tier "pro"`) || !strings.Contains(err.Error(), "Challenge") {
		t.Errorf("NewLimiter with a tier without a Challenge = %v, want ErrInvalidPolicy naming the tier and Challenge", err)
	}
	l, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{Name: "api", Rules: []core.Rule{{Limit: 5, Window: time.Hour, Challenge: 2}}},
		core.WithTiers(p.Resolve, map[string][]core.Rule{
			"free": {{Limit: 3, Window: time.Hour, Challenge: 1}},
			"pro":  {{Limit: 50, Window: time.Hour, Challenge: 40}},
		}))
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := l.Allow(ctx, "k"); !d.Challenged || d.Limit != 3 {
		t.Fatalf("Allow(k) in free (Challenge 1) = %+v, want challenged under free's rules", d)
	}
	if err := l.Pass(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	p.Set("k", "pro")
	if err := l.InvalidateTier(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if d, _ := l.Allow(ctx, "k"); !d.Allowed || d.Limit != 50 {
			t.Fatalf("Allow(k) #%d in pro = %+v, want admitted under pro's rules", i+1, d)
		}
	}
}
