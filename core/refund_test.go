package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redistest"
	"github.com/ratekit/ratekit/internal/testkit"
	"github.com/ratekit/ratekit/redisstore"
)

// TestRefundOnce: a decision's units come back once, however often its
// Refund is called, for both algorithms; and a refund gives back only
// the units of its own decision, not those of another admitted at the
// same time.
func TestRefundOnce(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	for _, store := range []struct {
		name string
		s    core.Store
	}{{"memory", core.NewMemoryStore()}, {"redis", redisstore.New(srv.Client(t))}} {
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

// TestRefundFailureReported: a refund whose store call fails returns the
// error (and reports it), for a rate limit's units as for a lease; it
// used to be lost when the connection broke.
func TestRefundFailureReported(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	obs := &eventLog{}
	l := testkit.Limiter(t, redisstore.New(redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1})),
		core.Policy{Name: "refund-fail", Rules: []core.Rule{{Limit: 2, Window: time.Hour}}},
		core.WithTimeout(time.Second), core.WithObserver(obs))
	ctx := context.Background()
	d, _ := l.Allow(ctx, "k")
	if !d.Allowed {
		t.Fatalf("Allow = %+v", d)
	}
	proxy.SetDropping(true)
	if err := d.Refund(ctx); err == nil {
		t.Fatal("Refund with the connection dropping: nil error, want the store's")
	}
	if got := obs.count(core.EventStoreError); got != 1 {
		t.Errorf("store errors after the failed refund: %d, want 1", got)
	}
	proxy.SetDropping(false)
	if got, _ := l.Peek(ctx, "k"); got.Remaining != 1 {
		t.Errorf("after the failed refund: Remaining = %d, want 1 (the unit stays counted)", got.Remaining)
	}
}
