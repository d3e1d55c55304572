package redissuite

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// testRedisMatchesMemory drives the Redis store and the memory store
// through the same random takes, peeks and refunds on a stepped clock and
// requires the same decisions, field by field. The limits are large
// enough that the Redis log outgrows what its script reads whole, so the
// hinted reads, chunk reads, trims and TTL renewals of long logs are all
// taken, with several rules and costs above 1.
func testRedisMatchesMemory(t *testing.T, drv Driver) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			clock := newTestClock()
			p := core.Policy{Name: fmt.Sprint("model", seed), Rules: []core.Rule{
				{Limit: 90, Window: 40 * time.Millisecond},
				{Limit: 400, Window: 300 * time.Millisecond},
			}}
			if seed%2 == 1 {
				p.Rules = p.Rules[1:]
			}
			opts := []core.Option{core.WithClock(clock.Now), core.WithDenyCache(0), core.WithTimeout(time.Second)}
			store := drv.New(t, srv)
			red := testkit.Limiter(t, store, p, opts...)
			mem := testkit.Limiter(t, core.NewMemoryStore(), p, opts...)
			type held struct{ r, m core.Decision }
			var admitted []held
			keys := []string{"a", "b"}
			for i := range 3000 {
				clock.Add(time.Duration(rng.IntN(400)) * time.Microsecond)
				key := keys[rng.IntN(len(keys))]
				switch op := rng.IntN(20); {
				case op == 0 && len(admitted) > 0:
					j := rng.IntN(len(admitted))
					h := admitted[j]
					admitted = append(admitted[:j], admitted[j+1:]...)
					if err := h.r.Refund(ctx); err != nil {
						t.Fatalf("op %d: redis refund: %v", i, err)
					}
					if err := h.m.Refund(ctx); err != nil {
						t.Fatalf("op %d: memory refund: %v", i, err)
					}
				case op == 1:
					r, err1 := red.Peek(ctx, key)
					m, err2 := mem.Peek(ctx, key)
					same(t, i, "peek", r, m, err1, err2)
				default:
					n := int64(1 + rng.IntN(3))
					r, err1 := red.AllowN(ctx, key, n)
					m, err2 := mem.AllowN(ctx, key, n)
					same(t, i, fmt.Sprintf("take %d of %s", n, key), r, m, err1, err2)
					if r.Allowed && m.Allowed {
						admitted = append(admitted, held{r, m})
						if len(admitted) > 50 {
							admitted = admitted[1:]
						}
					}
				}
			}
			// The run did reach the long-log paths: the key carries a
			// hint per rule.
			v := rdb.GetRange(ctx, store.Key(p.Name, "a"), 8, 15).Val()
			if len(v) != 8 || int(math.Float64frombits(binary.LittleEndian.Uint64([]byte(v)))) != len(p.Rules) {
				t.Errorf("key a's header has no hint per rule: %q", v)
			}
		})
	}
}

func same(t *testing.T, i int, what string, r, m core.Decision, err1, err2 error) {
	t.Helper()
	if err1 != nil || err2 != nil {
		t.Fatalf("op %d %s: errors %v / %v", i, what, err1, err2)
	}
	if r.Source != core.SourceStore {
		t.Fatalf("op %d %s: redis decision from %v", i, what, r.Source)
	}
	pub := func(d core.Decision) string {
		return fmt.Sprintf("allowed %v limit %d window %v remaining %d retry %v reset %v rule %d %+v",
			d.Allowed, d.Limit, d.Window, d.Remaining, d.RetryAfter, d.ResetAfter, d.Rule, d.Rules())
	}
	if pub(r) != pub(m) {
		t.Fatalf("op %d %s:\n redis  %s\n memory %s", i, what, pub(r), pub(m))
	}
}

// testRefundFailureReported: a refund whose store call fails returns the
// error (and reports it), for a rate limit's units as for a lease; it
// used to be lost when the connection broke.
func testRefundFailureReported(t *testing.T, drv Driver) {
	t.Parallel()
	l, proxy := failRefund(t, drv, redistest.Start(t), core.Policy{Name: "refund-fail", Rules: []core.Rule{{Limit: 2, Window: time.Hour}}})
	ctx := context.Background()
	proxy.SetDropping(false)
	// A client that sends no command twice (rueidis) fails the first
	// call on a connection the proxy closed, and dials again for the
	// next: the store's own answer is the point.
	var got core.Decision
	testkit.WaitUntil(t, "the store answers a peek again", func() bool {
		got, _ = l.Peek(ctx, "k")
		return got.Source == core.SourceStore
	})
	if got.Remaining != 1 {
		t.Errorf("after the failed refund: Remaining = %d, want 1 (the unit stays counted)", got.Remaining)
	}
}
