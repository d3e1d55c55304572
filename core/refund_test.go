package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// TestRefundOnce: a decision's units come back once, however often its
// Refund is called, for both algorithms; and a refund gives back only
// the units of its own decision, not those of another admitted at the
// same time.
func TestRefundOnce(t *testing.T) {
	ctx := context.Background()
	for _, store := range []struct {
		name string
		s    core.Store
	}{{"memory", core.NewMemoryStore()}} { // Redis: internal/test/redissuite's RefundOnce
		for _, alg := range []core.Algorithm{core.SlidingLog, core.SlidingBuckets} {
			t.Run(store.name+"/"+alg.String(), func(t *testing.T) {
				l := testkit.Limiter(t, store.s, core.Policy{Name: "refund-" + alg.String(), Algorithm: alg, Buckets: 10,
					Rules: []core.Rule{{Limit: 5, Window: time.Minute}}}, core.WithTimeout(5*time.Second))
				var ds []core.Decision
				for i := range 3 {
					d, err := l.Allow(ctx, "k")
					if err != nil || !d.Allowed {
						t.Fatalf("Allow #%d = %+v, %v", i, d, err)
					}
					ds = append(ds, d)
				}
				for range 2 {
					if err := ds[2].Refund(ctx); err != nil {
						t.Fatalf("Refund: %v", err)
					}
				}
				if d, _ := l.Peek(ctx, "k"); d.Remaining != 3 {
					t.Errorf("after refunding one decision twice: Remaining = %d, want 3", d.Remaining)
				}
			})
		}
	}
}
