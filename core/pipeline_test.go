package core_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redistest"
)

// TestRedisPipeliningExact drives 64 goroutines through a store that
// pipelines above 1 call in flight: decisions share round trips, and the
// limit still holds exactly.
func TestRedisPipeliningExact(t *testing.T) {
	srv := redistest.Start(t)
	for _, threshold := range []int{0, 1} {
		t.Run(fmt.Sprintf("threshold=%d", threshold), func(t *testing.T) {
			store := core.NewRedisStore(srv.Client(t), core.WithPipelining(threshold))
			l, err := core.NewLimiter(store, core.Policy{
				Name:  fmt.Sprintf("pipe-%d", threshold),
				Rules: []core.Rule{{Limit: 500, Window: time.Minute}},
			}, core.WithTimeout(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			var admitted, fallbacks atomic.Int64
			var wg sync.WaitGroup
			for range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 12 {
						d, err := l.Allow(context.Background(), "hot")
						if err != nil {
							t.Error(err)
							return
						}
						if d.Source.Fallback() {
							fallbacks.Add(1)
						}
						if d.Allowed {
							admitted.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			if fallbacks.Load() != 0 {
				t.Fatalf("%d decisions fell back", fallbacks.Load())
			}
			if got := admitted.Load(); got != 500 {
				t.Errorf("admitted %d of 768 with limit 500, want exactly 500", got)
			}
		})
	}
}
