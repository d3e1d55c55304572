package core_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redistest"
	"github.com/ratekit/ratekit/redisstore"
)

// BenchmarkInFlight measures an acquire and its release (Allow then
// Refund) under an InFlight policy on each store, from one goroutine and
// from GOMAXPROCS goroutines, keys rotating over 4096 so that every
// acquire is admitted.
func BenchmarkInFlight(b *testing.B) {
	b.Run("memory", func(b *testing.B) { benchInFlight(b, core.NewMemoryStore()) })
	b.Run("redis", func(b *testing.B) {
		srv := redistest.Start(b) // skipped with -short
		benchInFlight(b, redisstore.New(srv.Client(b)))
	})
}

func benchInFlight(b *testing.B, store core.Store) {
	const nkeys = 4096
	keys := benchKeys(nkeys)
	l, err := core.NewLimiter(store, core.Policy{Name: "bench-inflight", InFlight: 1000}, core.WithTimeout(time.Second))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var bad atomic.Int64
	cycle := func(i uint64) {
		d, err := l.Allow(ctx, keys[i%nkeys])
		if err != nil {
			b.Fatal(err)
		}
		if !d.Allowed || d.Source != core.SourceStore {
			bad.Add(1)
		}
		if err := d.Refund(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for i := uint64(0); b.Loop(); i++ {
			cycle(i)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		var next atomic.Uint64
		b.RunParallel(func(pb *testing.PB) {
			i := next.Add(1) * 7919
			for pb.Next() {
				cycle(i)
				i++
			}
		})
	})
	if n := bad.Load(); n > 0 {
		b.Errorf("%d acquires were denied or fell back", n)
	}
}
