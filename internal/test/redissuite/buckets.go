package redissuite

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// testRedisBatchingExact drives 64 goroutines through one store, on one
// hot key and on keys of two algorithms at once: decisions share script
// calls (fewer calls than decisions), and every limit still holds
// exactly. With WithBatching(1) each decision is a call of its own.
func testRedisBatchingExact(t *testing.T, drv Driver) {
	for _, batch := range []int{1, 64} {
		t.Run(fmt.Sprintf("batch=%d", batch), func(t *testing.T) {
			srv := redistest.Start(t)
			admin := srv.Client(t)
			store := drv.Open(t, on(srv, Conf{Batching: batch}))
			hot := testkit.Limiter(t, store, core.Policy{Name: "hot", Rules: []core.Rule{{Limit: 500, Window: time.Minute}}},
				core.WithTimeout(5*time.Second), core.WithDenyCache(0))
			log := testkit.Limiter(t, store, core.Policy{Name: "log", Rules: []core.Rule{{Limit: 3, Window: time.Minute}, {Limit: 5, Window: time.Hour}}},
				core.WithTimeout(5*time.Second), core.WithDenyCache(0))
			buckets := testkit.Limiter(t, store, core.Policy{Name: "buckets", Algorithm: core.SlidingBuckets,
				Rules: []core.Rule{{Limit: 4, Window: time.Minute}}}, core.WithTimeout(5*time.Second), core.WithDenyCache(0))
			// Load the library first: the first calls of a new server find
			// it missing and are sent again.
			if _, err := hot.Peek(context.Background(), "warm"); err != nil {
				t.Fatal(err)
			}
			calls := commandCalls(t, admin, "fcall")
			var hotOK, logOK, bucketsOK, fallbacks, decisions atomic.Int64
			count := func(d core.Decision, err error, ok *atomic.Int64) {
				decisions.Add(1)
				switch {
				case err != nil:
					t.Error(err)
				case d.Source.Fallback():
					fallbacks.Add(1)
				case d.Allowed:
					ok.Add(1)
				}
			}
			ctx := context.Background()
			var wg sync.WaitGroup
			for g := range 64 {
				wg.Go(func() {
					for i := range 12 {
						d, err := hot.Allow(ctx, "hot")
						count(d, err, &hotOK)
						key := fmt.Sprintf("k%d", (g*12+i)%16)
						d, err = log.Allow(ctx, key)
						count(d, err, &logOK)
						d, err = buckets.Allow(ctx, key)
						count(d, err, &bucketsOK)
					}
				})
			}
			wg.Wait()
			if n := fallbacks.Load(); n != 0 {
				t.Fatalf("%d decisions fell back", n)
			}
			if got := hotOK.Load(); got != 500 {
				t.Errorf("hot key: admitted %d of 768 with limit 500, want exactly 500", got)
			}
			if got := logOK.Load(); got != 16*3 {
				t.Errorf("16 keys, SlidingLog 3 per minute: admitted %d, want %d", got, 16*3)
			}
			if got := bucketsOK.Load(); got != 16*4 {
				t.Errorf("16 keys, SlidingBuckets 4 per minute: admitted %d, want %d", got, 16*4)
			}
			sent := commandCalls(t, admin, "fcall") - calls
			t.Logf("%d decisions in %d script calls", decisions.Load(), sent)
			switch {
			case batch == 1 && sent != decisions.Load():
				t.Errorf("WithBatching(1): %d script calls for %d decisions, want one each", sent, decisions.Load())
			case batch > 1 && sent >= decisions.Load():
				t.Errorf("%d script calls for %d concurrent decisions, want fewer (batched)", sent, decisions.Load())
			}
		})
	}
}
