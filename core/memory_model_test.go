package core_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/driver"
)

// TestMemoryStoreMatchesModel drives the memory store with random takes,
// refunds and clock steps (some backwards) and checks every answer against
// a brute-force sliding log: on small windows, and on windows of
// thousands of events, whose logs span many chunks.
func TestMemoryStoreMatchesModel(t *testing.T) {
	t.Run("small", func(t *testing.T) {
		matchModel(t, []core.Rule{{Limit: 7, Window: 300 * time.Millisecond}, {Limit: 20, Window: 2 * time.Second}}, 4000, 40000)
	})
	t.Run("long", func(t *testing.T) {
		matchModel(t, []core.Rule{{Limit: 500, Window: 300 * time.Millisecond}, {Limit: 2000, Window: 2 * time.Second}}, 20000, 1500)
	})
}

// matchModel runs steps random operations on rules (the second rule has
// the longest window), the clock moving up to maxStep µs forward at a
// time (or, one time in 20, up to 3 ms back).
func matchModel(t *testing.T, rules []core.Rule, steps, maxStep int) {
	clock := newTestClock()
	store := core.NewMemoryStore()
	type unit struct {
		at int64
	}
	var model []unit
	type taken struct {
		q  driver.Query
		at int64
	}
	var admitted []taken
	rng := rand.New(rand.NewPCG(7, 11))
	ctx := context.Background()
	for step := range steps {
		switch r := rng.IntN(100); {
		case r < 5:
			clock.Add(-time.Duration(rng.IntN(3000)) * time.Microsecond)
		default:
			clock.Add(time.Duration(rng.IntN(maxStep)) * time.Microsecond)
		}
		now := clock.Now().UnixMicro()
		if rng.IntN(10) == 0 && len(admitted) > 0 {
			k := rng.IntN(len(admitted))
			tk := admitted[k]
			admitted = append(admitted[:k], admitted[k+1:]...)
			if err := store.Refund(ctx, tk.q, tk.at); err != nil {
				t.Fatal(err)
			}
			removed := int64(0)
			kept := model[:0]
			for _, u := range model {
				if u.at == tk.at && removed < tk.q.N {
					removed++
					continue
				}
				kept = append(kept, u)
			}
			model = kept
			continue
		}
		n := int64(1 + rng.IntN(3))
		q := driver.Query{Policy: "model", Key: "k", Rules: asDriver(rules), N: n, Now: clock.Now().UnixMicro()}
		res, err := store.Take(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		wantAllowed := true
		for i, r := range rules {
			w := r.Window.Microseconds()
			var used int64
			for _, u := range model {
				if u.at > now-w {
					used++
				}
			}
			if res.Allowed {
				used += n
			}
			if res.Rules.All()[i].Used != used {
				t.Fatalf("step %d rule %d: Used = %d, model %d", step, i, res.Rules.All()[i].Used, used)
			}
			if !res.Allowed {
				var in []int64
				for _, u := range model {
					if u.at > now-w {
						in = append(in, u.at)
					}
				}
				slices.Sort(in)
				var want time.Duration
				if need := used + n - r.Limit; need > 0 {
					want = time.Duration(in[need-1]+w-now) * time.Microsecond
				}
				if got := res.Rules.All()[i].RetryAfter; got != want {
					t.Fatalf("step %d rule %d: RetryAfter = %v, model %v", step, i, got, want)
				}
			}
			if !res.Allowed && used+n > r.Limit {
				wantAllowed = false
			}
			if used-boolInt(res.Allowed)*n+n > r.Limit {
				wantAllowed = false
			}
		}
		if res.Allowed != wantAllowed {
			t.Fatalf("step %d: Allowed = %v, model %v", step, res.Allowed, wantAllowed)
		}
		if res.Allowed {
			for range n {
				model = append(model, unit{at: now})
			}
			admitted = append(admitted, taken{q: q, at: res.At})
		}
		// The model forgets units older than the longest window.
		kept := model[:0]
		for _, u := range model {
			if u.at > now-rules[1].Window.Microseconds() {
				kept = append(kept, u)
			}
		}
		model = kept
	}
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// asDriver returns rules as a store takes them.
func asDriver(rules []core.Rule) []driver.Rule {
	out := make([]driver.Rule, len(rules))
	for i, r := range rules {
		out[i] = driver.Rule(r)
	}
	return out
}
