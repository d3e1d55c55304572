package core_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

func newTiered(t *testing.T, p *testkit.Plans, opts ...core.Option) *core.Limiter {
	t.Helper()
	opts = append(opts, core.WithTiers(p.Resolve, map[string][]core.Rule{
		"free": {{Limit: 3, Window: time.Minute}},
		"pro":  {{Limit: 10, Window: time.Minute}},
	}))
	l, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{
		Name:  "api",
		Rules: []core.Rule{{Limit: 1, Window: time.Minute}},
	}, opts...)
	if err != nil {
		t.Fatalf("NewLimiter: %v", err)
	}
	return l
}

func TestTiersLimitPerKey(t *testing.T) {
	p := testkit.NewPlans(map[string]string{"k-free": "free", "k-pro": "pro"})
	l := newTiered(t, p)
	ctx := context.Background()
	tests := []struct {
		key  string
		want int
	}{
		{"k-free", 3},
		{"k-pro", 10},
		{"k-unknown", 1}, // unresolvable: the policy's own rules
	}
	for _, tc := range tests {
		t.Run(tc.key, func(t *testing.T) {
			got := 0
			for range 20 {
				d, err := l.Allow(ctx, tc.key)
				if err != nil {
					t.Fatalf("Allow(%q): %v", tc.key, err)
				}
				if d.Allowed {
					got++
				}
			}
			if got != tc.want {
				t.Errorf("Allow(%q) admitted %d of 20, want %d", tc.key, got, tc.want)
			}
		})
	}
}

func TestTiersUpgradeTakesEffectAtOnce(t *testing.T) {
	p := testkit.NewPlans(map[string]string{"k": "free"})
	l := newTiered(t, p)
	ctx := context.Background()
	for range 3 {
		if d, _ := l.Allow(ctx, "k"); !d.Allowed {
			t.Fatalf("free request denied early: %+v", d)
		}
	}
	// Denied twice: the second answer comes from the deny cache.
	for range 2 {
		if d, _ := l.Allow(ctx, "k"); d.Allowed {
			t.Fatalf("4th free request admitted: %+v", d)
		}
	}
	p.Set("k", "pro")
	if err := l.InvalidateTier(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	d, err := l.Allow(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	// The usage carries over (3 used) and the pro limit applies at once.
	if !d.Allowed || d.Limit != 10 || d.Remaining != 6 {
		t.Errorf("after upgrade Allow = %+v, want Allowed with Limit 10, Remaining 6", d)
	}
}

func TestTiersCache(t *testing.T) {
	p := testkit.NewPlans(map[string]string{"k": "pro"})
	l := newTiered(t, p, core.WithTierCache(10, time.Hour))
	ctx := context.Background()
	for range 5 {
		if _, err := l.Allow(ctx, "k"); err != nil {
			t.Fatal(err)
		}
	}
	if n := p.Calls(); n != 1 {
		t.Errorf("resolve called %d times for 5 requests, want 1 (cached)", n)
	}
	p.Set("k", "free")
	if d, _ := l.Peek(ctx, "k"); d.Limit != 10 {
		t.Errorf("cached tier: Peek Limit = %d, want 10 until invalidated", d.Limit)
	}
	if err := l.InvalidateTier(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if d, _ := l.Peek(ctx, "k"); d.Limit != 3 {
		t.Errorf("after InvalidateTier: Peek Limit = %d, want 3", d.Limit)
	}
}

func TestTiersRefundAndReset(t *testing.T) {
	p := testkit.NewPlans(map[string]string{"k": "free"})
	l := newTiered(t, p)
	ctx := context.Background()
	d, _ := l.Allow(ctx, "k")
	if err := d.Refund(ctx); err != nil {
		t.Fatalf("Refund: %v", err)
	}
	if pd, _ := l.Peek(ctx, "k"); pd.Remaining != 3 {
		t.Errorf("after Refund Peek Remaining = %d, want 3", pd.Remaining)
	}
	for range 4 {
		_, _ = l.Allow(ctx, "k")
	}
	if err := l.Reset(ctx, "k"); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	if d, _ := l.Allow(ctx, "k"); !d.Allowed || d.Remaining != 2 {
		t.Errorf("after Reset Allow = %+v, want Allowed with Remaining 2", d)
	}
}

func TestTiersInvalid(t *testing.T) {
	base := core.Policy{Name: "api", Rules: []core.Rule{{Limit: 1, Window: time.Minute}}}
	resolve := func(context.Context, string) (string, error) { return "", nil }
	tests := []struct {
		name string
		opt  core.Option
	}{
		{"nil resolve", core.WithTiers(nil, map[string][]core.Rule{"a": {{Limit: 1, Window: time.Minute}}})},
		{"no tiers", core.WithTiers(resolve, nil)},
		{"bad tier rule", core.WithTiers(resolve, map[string][]core.Rule{"a": {{Limit: 0, Window: time.Minute}}})},
		{"bad cache", core.WithTierCache(-1, time.Second)},
		// A tier must keep the policy's windows, so usage carries over.
		{"tier with another window", core.WithTiers(resolve, map[string][]core.Rule{"a": {{Limit: 5, Window: time.Hour}}})},
		{"tier with an extra window", core.WithTiers(resolve, map[string][]core.Rule{"a": {{Limit: 5, Window: time.Minute}, {Limit: 9, Window: time.Hour}}})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := []core.Option{tc.opt}
			if tc.name == "bad cache" {
				opts = append(opts, core.WithTiers(resolve, map[string][]core.Rule{"a": {{Limit: 1, Window: time.Minute}}}))
			}
			_, err := core.NewLimiter(core.NewMemoryStore(), base, opts...)
			if !errors.Is(err, core.ErrInvalidPolicy) {
				t.Errorf("NewLimiter with %s: err = %v, want ErrInvalidPolicy", tc.name, err)
			}
		})
	}
}

// TestTiersUsageCarriesOver: usage counted under one tier is seen by the
// next, both ways, for both algorithms: 200 units used as
// pro, then free (a smaller daily limit) is full, and pro again sees the
// 200 (issue: a downgrade then upgrade must not forget usage).
func TestTiersUsageCarriesOver(t *testing.T) {
	// Redis: internal/test/redissuite's TiersUsageCarriesOver.
	testkit.TiersUsageCarriesOver(t, testkit.Memory)
}

// TestTierLookupFailureNotCached: a lookup that fails (here, a caller that
// hung up) decides its request by the policy's own rules, and is not
// cached: the next requests of the key get its tier.
func TestTierLookupFailureNotCached(t *testing.T) {
	resolve := func(ctx context.Context, key string) (string, error) {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		return "restricted", nil
	}
	l := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "tiers-err", Rules: []core.Rule{{Limit: 100, Window: time.Minute}}},
		core.WithTiers(resolve, map[string][]core.Rule{"restricted": {{Limit: 1, Window: time.Minute}}}))
	hungUp, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Allow(hungUp, "abuser"); err == nil {
		t.Fatal("Allow with a canceled context = nil error")
	}
	admitted := 0
	for range 10 {
		d, err := l.Allow(context.Background(), "abuser")
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		}
	}
	if admitted != 1 {
		t.Errorf("after a failed lookup, %d of 10 calls admitted, want 1 (the restricted tier, 1 a minute)", admitted)
	}
}
