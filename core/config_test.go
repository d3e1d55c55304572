package core_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
)

// TestConfigErrorsNameTheField extends the validation table of
// core/driver/drivertest (which every store runs) with the cases it does not
// cover: each invalid configuration is an error at construction, wrapping
// ErrInvalidPolicy, that names the field or option at fault.
func TestConfigErrorsNameTheField(t *testing.T) {
	ok := []core.Rule{{Limit: 4, Window: time.Second}}
	resolve := func(context.Context, string) (string, error) { return "pro", nil }
	tiers := map[string][]core.Rule{"pro": {{Limit: 8, Window: time.Second}}}
	for _, tc := range []struct {
		name      string
		policy    core.Policy
		opts      []core.Option
		wantField string
	}{
		{"name with a control character", core.Policy{Name: "a\x01", Rules: ok}, nil, "Name"},
		{"name with DEL", core.Policy{Name: "a\x7f", Rules: ok}, nil, "Name"},
		{"name not ASCII", core.Policy{Name: "登录", Rules: ok}, nil, "Name"},
		{"name with a quote", core.Policy{Name: `a"b`, Rules: ok}, nil, "Name"},
		{"name with a backslash", core.Policy{Name: `a\b`, Rules: ok}, nil, "Name"},
		{"name with a closing brace", core.Policy{Name: "a}", Rules: ok}, nil, "Name"},
		{"negative algorithm", core.Policy{Name: "p", Rules: ok, Algorithm: -1}, nil, "Algorithm"},
		{"negative buckets", core.Policy{Name: "p", Rules: ok, Algorithm: core.SlidingBuckets, Buckets: -1}, nil, "Buckets"},
		{"too many buckets", core.Policy{Name: "p", Rules: ok, Algorithm: core.SlidingBuckets, Buckets: 1000 + 1}, nil, "Buckets"},
		{"negative window", core.Policy{Name: "p", Rules: []core.Rule{{Limit: 1, Window: -time.Second}}}, nil, "Rules[0].Window"},
		{"negative shards", core.Policy{Name: "p", Rules: ok, Shards: -1}, nil, "Shards"},
		{"SlidingLog over 100000", core.Policy{Name: "p", Rules: []core.Rule{{Limit: 100_001, Window: time.Hour}}}, nil, "SlidingBuckets"},
		{"too many shards", core.Policy{Name: "p", Rules: []core.Rule{{Limit: 1000, Window: time.Second}}, Shards: 257}, nil, "Shards"},
		{"shards over a limit", core.Policy{Name: "p", Rules: []core.Rule{{Limit: 10, Window: time.Hour}, {Limit: 3, Window: time.Second}}, Shards: 4}, nil, "Rules[1].Limit"},
		{"negative timeout", core.Policy{Name: "p", Rules: ok}, []core.Option{core.WithTimeout(-time.Millisecond)}, "WithTimeout"},
		{"negative breaker cooldown", core.Policy{Name: "p", Rules: ok}, []core.Option{core.WithBreaker(3, -time.Second)}, "WithBreaker"},
		{"tiers without resolve", core.Policy{Name: "p", Rules: ok}, []core.Option{core.WithTiers(nil, tiers)}, "WithTiers"},
		{"tiers empty", core.Policy{Name: "p", Rules: ok}, []core.Option{core.WithTiers(resolve, nil)}, "WithTiers"},
		{"tier with a bad rule", core.Policy{Name: "p", Rules: ok},
			[]core.Option{core.WithTiers(resolve, map[string][]core.Rule{"pro": {{Limit: 0, Window: time.Second}}})}, `tier "pro"`},
		{"tier with no rules", core.Policy{Name: "p", Rules: ok},
			[]core.Option{core.WithTiers(resolve, map[string][]core.Rule{"free": nil})}, `tier "free"`},
		{"tier under the shards", core.Policy{Name: "p", Rules: ok, Shards: 4},
			[]core.Option{core.WithTiers(resolve, map[string][]core.Rule{"free": {{Limit: 2, Window: time.Second}}})}, "Shards"},
		{"negative tier cache", core.Policy{Name: "p", Rules: ok},
			[]core.Option{core.WithTiers(resolve, tiers), core.WithTierCache(-1, time.Minute)}, "WithTierCache"},
		{"tier cache without ttl", core.Policy{Name: "p", Rules: ok},
			[]core.Option{core.WithTiers(resolve, tiers), core.WithTierCache(10, 0)}, "WithTierCache"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := core.NewLimiter(core.NewMemoryStore(), tc.policy, tc.opts...)
			if !errors.Is(err, core.ErrInvalidPolicy) || l != nil {
				t.Fatalf("NewLimiter(%+v) = %v, %v; want ErrInvalidPolicy and no limiter", tc.policy, l, err)
			}
			if !strings.Contains(err.Error(), tc.wantField) {
				t.Errorf("NewLimiter(%+v) error %q does not name %s", tc.policy, err, tc.wantField)
			}
		})
	}

	// The edges that are valid.
	for _, p := range []core.Policy{
		{Name: "a-b_c.d:e/f|g~!#$%&'()*+,;<=>?@[]^`", Rules: ok},
		{Name: "p", Rules: ok, Shards: 1},
		{Name: "p", Rules: ok, Shards: 4},
		{Name: "p", Rules: []core.Rule{{Limit: 256, Window: time.Second}}, Shards: 256},
		{Name: "p", Rules: ok, Algorithm: core.SlidingBuckets, Buckets: 1000},
	} {
		if _, err := core.NewLimiter(core.NewMemoryStore(), p); err != nil {
			t.Errorf("NewLimiter(%+v) = %v, want a limiter", p, err)
		}
	}
}
