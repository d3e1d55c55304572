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

func TestInFlightValidation(t *testing.T) {
	t.Parallel()
	rules := []core.Rule{{Limit: 5, Window: time.Minute}}
	for _, tc := range []struct {
		name  string
		p     core.Policy
		opts  []core.Option
		store core.Store
		field string
	}{
		{"negative", core.Policy{Name: "p", InFlight: -1}, nil, nil, "InFlight"},
		{"too large", core.Policy{Name: "p", InFlight: 100_001}, nil, nil, "InFlight"},
		{"ttl without in-flight", core.Policy{Name: "p", Rules: rules, LeaseTTL: time.Minute}, nil, nil, "InFlight"},
		{"mixed with rules", core.Policy{Name: "p", InFlight: 2, Rules: rules}, nil, nil, "Rules"},
		{"algorithm", core.Policy{Name: "p", InFlight: 2, Algorithm: core.SlidingBuckets}, nil, nil, "Algorithm"},
		{"buckets", core.Policy{Name: "p", InFlight: 2, Buckets: 10}, nil, nil, "Buckets"},
		{"shards", core.Policy{Name: "p", InFlight: 2, Shards: 2}, nil, nil, "Shards"},
		{"lockout", core.Policy{Name: "p", InFlight: 2, Lockout: core.Lockout{For: time.Hour}}, nil, nil, "Lockout"},
		{"ttl too short", core.Policy{Name: "p", InFlight: 2, LeaseTTL: 999 * time.Millisecond}, nil, nil, "LeaseTTL"},
		{"ttl not in ms", core.Policy{Name: "p", InFlight: 2, LeaseTTL: time.Second + time.Microsecond}, nil, nil, "LeaseTTL"},
		{"bad name", core.Policy{Name: "a b", InFlight: 2}, nil, nil, "Name"},
		{"tiers", core.Policy{Name: "p", InFlight: 2},
			[]core.Option{core.WithTiers(func(context.Context, string) (string, error) { return "", nil }, map[string][]core.Rule{"x": rules})},
			nil, "WithTiers"},
		{"own store", core.Policy{Name: "p", InFlight: 2}, nil, testkit.FailingStore{Err: errors.New("down")}, "driver.Leases"},
		{"bad timeout", core.Policy{Name: "p", InFlight: 2}, []core.Option{core.WithTimeout(0)}, nil, "WithTimeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.store
			if s == nil {
				s = core.NewMemoryStore()
			}
			_, err := core.NewLimiter(s, tc.p, tc.opts...)
			if !errors.Is(err, core.ErrInvalidPolicy) || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("NewLimiter(%+v) = %v, want ErrInvalidPolicy naming %s", tc.p, err, tc.field)
			}
		})
	}
	for _, p := range []core.Policy{
		{Name: "p", InFlight: 1},
		{Name: "p", InFlight: 100_000, LeaseTTL: time.Second},
		{Name: "p", InFlight: 3, Shards: 1},
	} {
		if err := p.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v, want nil", p, err)
		}
	}
}

// TestInFlightExact: instances × goroutines asking for one key never have
// more than K requests in flight, measured inside the "handler" (between
// the admission and its refund); they do reach K; and every lease is
// released at the end.
func TestInFlightExact(t *testing.T) {
	t.Parallel()
	// On Redis and on a Cluster: internal/test/redissuite's InFlightExact.
	testkit.InFlightExact(t, testkit.Memory)
}

// TestInFlightRefundOnce: a lease is released once, however often its
// decision (or a copy of it) is refunded; releasing one lease never
// frees another.
func TestInFlightRefundOnce(t *testing.T) {
	t.Parallel()
	// On Redis: internal/test/redissuite's InFlightRefundOnce.
	testkit.InFlightRefundOnce(t, testkit.Memory)
}

// TestInFlightCost: a request of cost n holds n units, all released at
// once; a cost above the limit is invalid.
func TestInFlightCost(t *testing.T) {
	t.Parallel()
	// On Redis: internal/test/redissuite's InFlightCost.
	testkit.InFlightCost(t, testkit.Memory)
}

// TestInFlightAllowAll: a concurrency limit and a rate limit decided
// together; a denial by the rate limit releases the lease.
func TestInFlightAllowAll(t *testing.T) {
	t.Parallel()
	store := core.NewMemoryStore()
	conc := testkit.InFlight(t, store, "conc", 1)
	rate := testkit.Limiter(t, store, core.Policy{Name: "rate", Rules: []core.Rule{{Limit: 1, Window: time.Hour}}})
	ctx := context.Background()
	claims := []core.Claim{{Limiter: conc, Key: "k"}, {Limiter: rate, Key: "k"}}
	ds, err := core.AllowAll(ctx, claims...)
	if err != nil || len(ds) != 2 || !ds[1].Allowed {
		t.Fatalf("AllowAll #1 = %+v, %v; want both admitted", ds, err)
	}
	for i := range ds {
		_ = ds[i].Refund(ctx) // the request ended; the rate unit is refunded too here
	}
	if _, err := rate.Allow(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	ds, err = core.AllowAll(ctx, claims...)
	if err != nil || len(ds) != 2 || ds[1].Allowed {
		t.Fatalf("AllowAll with the rate spent = %+v, %v; want the rate limit's denial", ds, err)
	}
	testkit.WantHeld(t, conc, "k", 0)
}
