package core_test

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redistest"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/ratekit/ratekit/rueidisstore"
)

// BenchmarkClusterPerMaster measures decisions per second on the local
// Cluster of three masters, on each driver with its client's default
// options: 64 goroutines (RunParallel) decide keys spread evenly over the
// masters (4,096 keys, each master a third), batching on. It reports
// decisions/s in all and per master (the total over three). Every master
// is a redis-server on the same machine as the benchmark, so the figure
// is bounded by that machine's cores, not by Redis.
func BenchmarkClusterPerMaster(b *testing.B) {
	c := redistest.StartCluster(b) // skipped with -short
	masters := 3
	b.Run("redis", func(b *testing.B) {
		benchCluster(b, redisstore.New(c.Client(b), redisstore.WithPrefix("bench-cluster")), masters)
	})
	b.Run("rueidis", func(b *testing.B) {
		client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: c.Addrs()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(client.Close)
		store := rueidisstore.New(client, rueidisstore.WithPrefix("bench-cluster"))
		b.Cleanup(store.Close)
		benchCluster(b, store, masters)
	})
}

func benchCluster(b *testing.B, store core.Store, masters int) {
	const (
		nkeys      = 4096
		goroutines = 64
	)
	keys := benchKeys(nkeys)
	l, err := core.NewLimiter(store, core.Policy{Name: "bench", Rules: []core.Rule{{Limit: 1000, Window: time.Second}}},
		core.WithTimeout(time.Second))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for _, k := range keys { // connections to every master, and the slot map
		if _, err := l.Peek(ctx, k); err != nil {
			b.Fatal(err)
		}
	}
	var fallbacks atomic.Int64
	var next atomic.Uint64
	b.SetParallelism(max(1, goroutines/runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := next.Add(1) * 7919
		for pb.Next() {
			d, err := l.Allow(ctx, keys[i%nkeys])
			if err != nil {
				b.Error(err)
				return
			}
			if d.Source.Fallback() {
				fallbacks.Add(1)
			}
			i++
		}
	})
	perSec := float64(b.N) / b.Elapsed().Seconds()
	b.ReportMetric(perSec, "decisions/s")
	b.ReportMetric(perSec/float64(masters), "decisions/s/master")
	if n := fallbacks.Load(); n > 0 {
		b.Errorf("%d decisions fell back: the store did not answer within the timeout", n)
	}
}
