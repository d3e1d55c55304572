package core_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// backend is where the instances of an in-flight test keep their leases:
// instance returns the store of one more app instance. (On Redis, each
// with a client of its own: internal/test/redissuite.)
type backend struct {
	name     string
	instance func(t *testing.T) core.Store
}

func memoryBackend() backend {
	s := core.NewMemoryStore()
	return backend{"memory", func(*testing.T) core.Store { return s }}
}

// inFlight returns a limiter of an InFlight policy, with a timeout long
// enough that a loaded machine never makes it fall back.
func inFlight(t *testing.T, s core.Store, name string, k int64, opts ...core.Option) *core.Limiter {
	t.Helper()
	return testkit.Limiter(t, s, core.Policy{Name: name, InFlight: k}, append([]core.Option{core.WithTimeout(5 * time.Second)}, opts...)...)
}

func wantHeld(t *testing.T, l *core.Limiter, key string, want int64) {
	t.Helper()
	d, err := l.Peek(context.Background(), key)
	if err != nil {
		t.Fatalf("Peek(%q): %v", key, err)
	}
	if rs := d.Rules(); len(rs) != 1 || rs[0].Used != want || d.Remaining != d.Limit-want {
		t.Errorf("Peek(%q) = %+v %+v, want %d units held", key, d, rs, want)
	}
}

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
	for _, mk := range []func(*testing.T) backend{
		func(*testing.T) backend { return memoryBackend() },
	} {
		b := mk(t)
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			checkExact(t, b, "exact-"+b.name)
		})
	}
}

func checkExact(t *testing.T, b backend, name string) {
	const (
		k         = 4
		instances = 3
		workers   = 12 // per instance
		rounds    = 25 // per worker
	)
	ctx := context.Background()
	ls := make([]*core.Limiter, instances)
	for i := range ls {
		ls[i] = inFlight(t, b.instance(t), name, k)
	}
	var (
		cur, peak          atomic.Int64
		admitted, fallback atomic.Int64
		wg                 sync.WaitGroup
	)
	for i := range instances * workers {
		l := ls[i%instances]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				d, err := l.Allow(ctx, "tenant")
				if err != nil {
					t.Error(err)
					return
				}
				if d.Source != core.SourceStore {
					fallback.Add(1)
				}
				if !d.Allowed {
					if d.RetryAfter != time.Second {
						t.Errorf("denial RetryAfter = %v, want the 1s hint", d.RetryAfter)
					}
					continue
				}
				admitted.Add(1)
				n := cur.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				time.Sleep(time.Millisecond) // the handler
				cur.Add(-1)
				if err := d.Refund(ctx); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if n := fallback.Load(); n > 0 {
		t.Fatalf("%d decisions fell back: the store did not answer within the timeout", n)
	}
	if p := peak.Load(); p != k {
		t.Errorf("%d instances × %d goroutines: at most %d requests in flight at once, want exactly %d", instances, workers, p, k)
	}
	t.Logf("%s: %d of %d requests admitted, at most %d in flight", b.name, admitted.Load(), instances*workers*rounds, peak.Load())
	for _, l := range ls {
		wantHeld(t, l, "tenant", 0)
	}
}

// TestInFlightRefundOnce: a lease is released once, however often its
// decision (or a copy of it) is refunded; releasing one lease never
// frees another.
func TestInFlightRefundOnce(t *testing.T) {
	t.Parallel()
	for _, b := range []backend{memoryBackend()} {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			obs := &testkit.EventCounts{}
			l := inFlight(t, b.instance(t), "once", 3, core.WithObserver(obs))
			ctx := context.Background()
			var ds []core.Decision
			for i := range 3 {
				d, err := l.Allow(ctx, "k")
				if err != nil || !d.Allowed {
					t.Fatalf("Allow #%d = %+v, %v", i+1, d, err)
				}
				ds = append(ds, d)
			}
			cp := ds[0]
			for _, d := range []*core.Decision{&ds[0], &ds[0], &cp} {
				if err := d.Refund(ctx); err != nil {
					t.Fatal(err)
				}
			}
			wantHeld(t, l, "k", 2)
			if d, _ := l.Allow(ctx, "k"); !d.Allowed {
				t.Fatalf("after one release: Allow = %+v, want admitted", d)
			}
			if d, _ := l.Allow(ctx, "k"); d.Allowed {
				t.Fatalf("with 3 held again: Allow = %+v, want denied", d)
			}
			if got := obs.Count(core.EventDecision); got != 5 {
				t.Errorf("observer saw %d decisions for 5 Allow calls (and peeks, which are not decisions), want 5", got)
			}
		})
	}
}

// TestInFlightCost: a request of cost n holds n units, all released at
// once; a cost above the limit is invalid.
func TestInFlightCost(t *testing.T) {
	t.Parallel()
	for _, b := range []backend{memoryBackend()} {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			l := inFlight(t, b.instance(t), "cost", 5)
			ctx := context.Background()
			big, err := l.AllowN(ctx, "k", 4)
			if err != nil || !big.Allowed || big.Remaining != 1 {
				t.Fatalf("AllowN(4) = %+v, %v; want admitted, 1 remaining", big, err)
			}
			if d, _ := l.AllowN(ctx, "k", 2); d.Allowed || d.Remaining != 1 {
				t.Fatalf("AllowN(2) with 4 of 5 held = %+v, want denied", d)
			}
			if err := big.Refund(ctx); err != nil {
				t.Fatal(err)
			}
			if d, _ := l.AllowN(ctx, "k", 5); !d.Allowed || d.Remaining != 0 {
				t.Fatalf("AllowN(5) after the release = %+v, want admitted, none remaining", d)
			}
			if _, err := l.AllowN(ctx, "k", 6); !errors.Is(err, core.ErrInvalidCost) {
				t.Errorf("AllowN(6) over InFlight 5: err = %v, want ErrInvalidCost", err)
			}
		})
	}
}

// TestInFlightAllowAll: a concurrency limit and a rate limit decided
// together; a denial by the rate limit releases the lease.
func TestInFlightAllowAll(t *testing.T) {
	t.Parallel()
	store := core.NewMemoryStore()
	conc := inFlight(t, store, "conc", 1)
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
	wantHeld(t, conc, "k", 0)
}
