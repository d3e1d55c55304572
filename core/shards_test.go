package core_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// queryLog is a Store that records the keys and rules of the queries it
// passes on.
type queryLog struct {
	core.Store
	mu sync.Mutex
	qs []driver.Query
}

func (s *queryLog) see(q driver.Query) {
	s.mu.Lock()
	s.qs = append(s.qs, q)
	s.mu.Unlock()
}

func (s *queryLog) Take(ctx context.Context, q driver.Query) (driver.Result, error) {
	s.see(q)
	return s.Store.Take(ctx, q)
}

func (s *queryLog) Peek(ctx context.Context, q driver.Query) (driver.Result, error) {
	s.see(q)
	return s.Store.Peek(ctx, q)
}

func (s *queryLog) Reset(ctx context.Context, q driver.Query) error {
	s.see(q)
	return s.Store.Reset(ctx, q)
}

func (s *queryLog) queries() []driver.Query {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.qs)
}

// TestShardsShares: shard i of a key is "<key>#<i>", the shards take
// turns, and their shares of every rule sum to the rule's limit, each at
// least one unit.
func TestShardsShares(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rules  []core.Rule
		shards int
		want   [][]int64 // per shard, per rule
	}{
		{"even", []core.Rule{{Limit: 8, Window: time.Minute}}, 4, [][]int64{{2}, {2}, {2}, {2}}},
		{"remainder first", []core.Rule{{Limit: 10, Window: time.Minute}}, 4, [][]int64{{3}, {3}, {2}, {2}}},
		{"one each", []core.Rule{{Limit: 3, Window: time.Minute}}, 3, [][]int64{{1}, {1}, {1}}},
		{"two rules", []core.Rule{{Limit: 5, Window: time.Second}, {Limit: 100, Window: time.Hour}}, 3,
			[][]int64{{2, 34}, {2, 33}, {1, 33}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &queryLog{Store: core.NewMemoryStore()}
			l := testkit.Limiter(t, st, core.Policy{Name: "shares", Rules: tc.rules, Shards: tc.shards})
			for range 2 * tc.shards {
				if _, err := l.Allow(context.Background(), "k"); err != nil {
					t.Fatal(err)
				}
			}
			qs := st.queries()
			for i, q := range qs {
				shard := i % tc.shards
				if want := fmt.Sprintf("k#%d", shard); q.Key != want {
					t.Errorf("query %d: Key %q, want %q (shards in turn)", i, q.Key, want)
				}
				for r, rule := range q.Rules {
					if rule.Limit != tc.want[shard][r] || rule.Window != tc.rules[r].Window {
						t.Errorf("query %d (shard %d): Rules[%d] = %+v, want Limit %d per %v", i, shard, r, rule, tc.want[shard][r], tc.rules[r].Window)
					}
				}
			}
			for r, rule := range tc.rules {
				var sum int64
				for _, w := range tc.want {
					sum += w[r]
				}
				if sum != rule.Limit {
					t.Fatalf("bad test: shares of rule %d sum to %d, not %d", r, sum, rule.Limit)
				}
			}
		})
	}
}

// TestShardsNeverOverAdmit: app instances flooding one sharded key
// concurrently admit exactly the limit between them.
func TestShardsNeverOverAdmit(t *testing.T) {
	// Redis: internal/test/redissuite's ShardsNeverOverAdmit.
	testkit.ShardsNeverOverAdmit(t, testkit.Memory)
}

// TestShardsPrecision measures the trade-off on a memory store with a
// stepped clock: never more than the limit in any window; under steady
// traffic from one instance no request is denied before the key holds its
// limit and every window admits the limit; under bursts a denial can come
// early, but never before the key holds one shard's share.
func TestShardsPrecision(t *testing.T) {
	const window = time.Second
	for _, tc := range []struct{ limit, shards int }{{10, 4}, {100, 8}, {1000, 16}} {
		t.Run(fmt.Sprintf("%d in %d shards", tc.limit, tc.shards), func(t *testing.T) {
			run := func(seed uint64, step func(r *rand.Rand) time.Duration, requests int) (worst int, perWindow []int) {
				now := time.Unix(1000, 0)
				st := core.NewMemoryStore()
				l := testkit.Limiter(t, st, core.Policy{Name: "p", Rules: []core.Rule{{Limit: int64(tc.limit), Window: window}}, Shards: tc.shards},
					core.WithClock(func() time.Time { return now }))
				r := rand.New(rand.NewPCG(seed, 7))
				var adm []time.Time // admission times, in order
				first := 0          // the oldest admission in the window
				worst = tc.limit
				start := now
				for range requests {
					now = now.Add(step(r))
					d, err := l.Allow(context.Background(), "k")
					if err != nil {
						t.Fatal(err)
					}
					for first < len(adm) && !adm[first].After(now.Add(-window)) {
						first++
					}
					in := len(adm) - first
					if d.Allowed {
						adm = append(adm, now)
						if in+1 > tc.limit {
							t.Fatalf("seed %d: %d admitted in the window ending %v, over the limit %d", seed, in+1, now.Sub(start), tc.limit)
						}
					} else {
						worst = min(worst, in)
					}
				}
				for w := start; w.Add(window).Before(now); w = w.Add(window) {
					n := 0
					for _, a := range adm {
						if a.After(w) && !a.After(w.Add(window)) {
							n++
						}
					}
					perWindow = append(perWindow, n)
				}
				return worst, perWindow
			}

			// Steady: 4 times the limit per window, evenly spaced.
			steady := func(*rand.Rand) time.Duration { return window / time.Duration(4*tc.limit) }
			worst, perWindow := run(1, steady, 12*tc.limit)
			// The shards fill in step and empty in step: no request is
			// denied before the key holds its limit.
			if worst != tc.limit {
				t.Errorf("steady traffic: a denial with %d admitted in the window, want %d (the limit)", worst, tc.limit)
			}
			for i, n := range perWindow {
				if n != tc.limit {
					t.Errorf("steady traffic: window %d admitted %d, want %d", i, n, tc.limit)
				}
			}

			// Bursts: mostly back to back, now and then a pause of up to
			// most of a window.
			bursty := func(r *rand.Rand) time.Duration {
				if r.IntN(10) == 0 {
					return time.Duration(r.Int64N(int64(window) * 8 / 10))
				}
				return time.Duration(r.Int64N(int64(5 * time.Millisecond)))
			}
			worstBurst := tc.limit
			for seed := range uint64(50) {
				w, _ := run(seed, bursty, 20*tc.limit/tc.shards+200)
				worstBurst = min(worstBurst, w)
			}
			if floor := tc.limit / tc.shards; worstBurst < floor {
				t.Errorf("bursts: a denial with %d admitted in the window, want at least one share (%d)", worstBurst, floor)
			}
			t.Logf("Limit %d, %d shards: denials come with >= %d admitted in the window under steady traffic, >= %d under bursts (one share = %d)",
				tc.limit, tc.shards, worst, worstBurst, tc.limit/tc.shards)
		})
	}
}

// TestShardsOperations: Peek, Refund, Reset and costs work on sharded
// keys; a cost above the smallest share is invalid.
func TestShardsOperations(t *testing.T) {
	ctx := context.Background()
	p := core.Policy{Name: "ops", Rules: []core.Rule{{Limit: 10, Window: time.Minute}}, Shards: 4} // shares 3, 3, 2, 2
	st := &queryLog{Store: core.NewMemoryStore()}
	l := testkit.Limiter(t, st, p)

	if _, err := l.AllowN(ctx, "k", 3); !errors.Is(err, core.ErrInvalidCost) {
		t.Errorf("AllowN(k, 3) with a smallest share of 2 = %v, want ErrInvalidCost", err)
	}
	d, err := l.AllowN(ctx, "k", 2)
	if err != nil || !d.Allowed || d.Limit != 3 || d.Remaining != 1 {
		t.Fatalf("AllowN(k, 2) on shard 0 = %+v, %v; want allowed, the shard's Limit 3, Remaining 1", d, err)
	}
	// Peek looks at the shard the next request goes to, and takes nothing.
	for range 2 {
		pd, err := l.Peek(ctx, "k")
		if err != nil || !pd.Allowed || pd.Limit != 3 || pd.Remaining != 3 {
			t.Errorf("Peek(k) = %+v, %v; want shard 1 untouched (Limit 3, Remaining 3)", pd, err)
		}
	}
	if err := d.Refund(ctx); err != nil {
		t.Fatal(err)
	}
	// Fill every shard, then Reset empties them all.
	admitted := 0
	for range 20 {
		if d, _ := l.Allow(ctx, "k"); d.Allowed {
			admitted++
		}
	}
	if admitted != 10 {
		t.Errorf("20 Allow(k) after the refund admitted %d, want 10 (the refund gave shard 0 its units back)", admitted)
	}
	before := len(st.queries())
	if err := l.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	var reset []string
	for _, q := range st.queries()[before:] {
		reset = append(reset, q.Key)
	}
	if want := []string{"k#0", "k#1", "k#2", "k#3"}; !slices.Equal(reset, want) {
		t.Errorf("Reset(k) reset %q, want every shard %q", reset, want)
	}
	admitted = 0
	for range 20 {
		if d, _ := l.Allow(ctx, "k"); d.Allowed {
			admitted++
		}
	}
	if admitted != 10 {
		t.Errorf("20 Allow(k) after Reset admitted %d, want 10", admitted)
	}
}
