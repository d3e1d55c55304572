package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redistest"
)

// TestRedisRefundIdempotent checks that a refund run twice for one take —
// as go-redis does when a reply is lost — gives the units back once, for
// both algorithms.
func TestRedisRefundIdempotent(t *testing.T) {
	srv := redistest.Start(t)
	store := core.NewRedisStore(srv.Client(t))
	ctx := context.Background()
	for _, alg := range []core.Algorithm{core.SlidingLog, core.SlidingBuckets} {
		t.Run(alg.String(), func(t *testing.T) {
			q := core.Query{
				Policy: "refund-" + alg.String(), Key: "k", Algorithm: alg, Buckets: 10,
				Rules: []core.Rule{{Limit: 5, Window: time.Minute}},
			}
			var last core.Result
			for i, id := range []string{"a", "b", "c"} {
				q.N, q.ID = 1, id
				res, err := store.Take(ctx, q)
				if err != nil || !res.Allowed {
					t.Fatalf("Take #%d = %+v, %v", i, res, err)
				}
				last = res
			}
			q.ID = "c"
			for range 2 {
				if err := store.Refund(ctx, q, last.At); err != nil {
					t.Fatalf("Refund: %v", err)
				}
			}
			q.ID = ""
			res, err := store.Peek(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			if got := res.Rules[0].Used; got != 2 {
				t.Errorf("after two refunds of one take: Used = %d, want 2", got)
			}
		})
	}
}
