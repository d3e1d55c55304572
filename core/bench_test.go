package core_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/redis/rueidis"

	"github.com/ratekit/ratekit/internal/redistest"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/ratekit/ratekit/rueidisstore"
)

// BenchmarkLimiterAllow measures one decision on each store, from one
// goroutine and from GOMAXPROCS goroutines. Keys rotate over 4096 so that
// requests are admitted (the deny cache does not answer them) and each
// window holds a realistic number of entries.
func BenchmarkLimiterAllow(b *testing.B) {
	b.Run("memory", func(b *testing.B) {
		benchAllow(b, core.NewMemoryStore())
	})
	b.Run("redis", func(b *testing.B) {
		srv := redistest.Start(b) // skipped with -short
		benchAllow(b, redisstore.New(srv.Client(b)))
	})
	// The same with one script call per decision: the baseline of
	// WithBatching's promise that a lone caller is no slower.
	b.Run("redis-unbatched", func(b *testing.B) {
		srv := redistest.Start(b)
		benchAllow(b, redisstore.New(srv.Client(b), redisstore.WithBatching(1)))
	})
	// The second driver, on rueidis with its default options.
	b.Run("rueidis", func(b *testing.B) {
		srv := redistest.Start(b)
		client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(client.Close)
		store := rueidisstore.New(client)
		b.Cleanup(store.Close)
		benchAllow(b, store)
	})
}

func benchAllow(b *testing.B, store core.Store) {
	const nkeys = 4096
	keys := benchKeys(nkeys)
	l, err := core.NewLimiter(store, core.Policy{Name: "bench", Rules: []core.Rule{{Limit: 1000, Window: time.Second}}},
		core.WithTimeout(time.Second))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var fallbacks atomic.Int64
	allow := func(i uint64) {
		d, err := l.Allow(ctx, keys[i%nkeys])
		if err != nil {
			b.Fatal(err)
		}
		if d.Source.Fallback() {
			fallbacks.Add(1)
		}
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for i := uint64(0); b.Loop(); i++ {
			allow(i)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		var next atomic.Uint64
		b.RunParallel(func(pb *testing.PB) {
			i := next.Add(1) * 7919
			for pb.Next() {
				allow(i)
				i++
			}
		})
	})
	if n := fallbacks.Load(); n > 0 {
		b.Errorf("%d decisions fell back: the store did not answer within the timeout", n)
	}
}

// BenchmarkLimiterDenied measures a denied flood: one hot key over its
// limit, from one goroutine and from GOMAXPROCS goroutines, with the
// limiter counting its refusals (TopRefused, as in production) and
// without. On Redis the denials come from the deny cache, as they do in
// `make bench`'s denied flood, whose figure must stay at least 80 times
// the Redis ceiling; on the memory store, from the store.
func BenchmarkLimiterDenied(b *testing.B) {
	b.Run("memory", func(b *testing.B) {
		benchDenied(b, func(testing.TB) core.Store { return core.NewMemoryStore() }, core.SourceStore)
	})
	b.Run("redis", func(b *testing.B) {
		srv := redistest.Start(b) // skipped with -short
		benchDenied(b, func(tb testing.TB) core.Store { return redisstore.New(srv.Client(tb)) }, core.SourceCache)
	})
}

func benchDenied(b *testing.B, newStore func(testing.TB) core.Store, src core.Source) {
	for _, counting := range []struct {
		name string
		opts []core.Option
	}{{"counted", nil}, {"uncounted", []core.Option{core.WithoutRefusals()}}} {
		b.Run(counting.name, func(b *testing.B) {
			opts := append([]core.Option{core.WithTimeout(time.Second)}, counting.opts...)
			l, err := core.NewLimiter(newStore(b), core.Policy{Name: "bench-denied-" + counting.name,
				Rules: []core.Rule{{Limit: 10, Window: time.Minute}}}, opts...)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			deadline := time.Now().Add(10 * time.Second)
			for {
				d, err := l.Allow(ctx, "flood")
				if err != nil {
					b.Fatal(err)
				}
				if !d.Allowed && d.Source == src {
					break
				}
				if time.Now().After(deadline) {
					b.Fatalf("no denial from %v after 10 s: %+v", src, d)
				}
			}
			var wrong atomic.Int64
			deny := func() {
				if d, err := l.Allow(ctx, "flood"); err != nil || d.Allowed || d.Source != src {
					wrong.Add(1)
				}
			}
			b.Run("serial", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					deny()
				}
			})
			b.Run("parallel", func(b *testing.B) {
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						deny()
					}
				})
			})
			if n := wrong.Load(); n > 0 {
				b.Errorf("%d decisions were not denials from %v", n, src)
			}
		})
	}
}

// BenchmarkChallenge measures the decisions of a policy with a Challenge
// (Rule.Challenge) beside the same policy without one, from one
// goroutine, keys rotating over 4096: "plain" has no Challenge; "below"
// has one that is never reached (every decision peeks, then takes);
// "challenged" reaches it at once without a pass (nothing is recorded);
// "passed" reaches it with every key passed (each decision is admitted
// through the pass).
func BenchmarkChallenge(b *testing.B) {
	b.Run("memory", func(b *testing.B) {
		benchChallenge(b, func(*testing.B) core.Store { return core.NewMemoryStore() })
	})
	b.Run("redis", func(b *testing.B) {
		srv := redistest.Start(b) // skipped with -short
		benchChallenge(b, func(b *testing.B) core.Store { return redisstore.New(srv.Client(b)) })
	})
}

func benchChallenge(b *testing.B, newStore func(b *testing.B) core.Store) {
	const (
		nkeys = 4096
		limit = 100_000
	)
	keys := benchKeys(nkeys)
	ctx := context.Background()
	for _, bc := range []struct {
		name      string
		challenge int64
		pass      bool
		want      func(core.Decision) bool
	}{
		{"plain", 0, false, func(d core.Decision) bool { return d.Allowed }},
		{"below", limit - 1, false, func(d core.Decision) bool { return d.Allowed }},
		{"challenged", 1, false, func(d core.Decision) bool { return d.Challenged }},
		{"passed", 1, true, func(d core.Decision) bool { return d.Allowed }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			l, err := core.NewLimiter(newStore(b), core.Policy{Name: "bench-" + bc.name,
				Rules: []core.Rule{{Limit: limit, Window: time.Minute, Challenge: bc.challenge}}}, core.WithTimeout(time.Second))
			if err != nil {
				b.Fatal(err)
			}
			if bc.pass {
				for _, k := range keys {
					if err := l.Pass(ctx, k); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				d, err := l.Allow(ctx, keys[i%nkeys])
				if err != nil {
					b.Fatal(err)
				}
				if !bc.want(d) || d.Source != core.SourceStore {
					b.Fatalf("Allow = %+v, not the decision this case measures", d)
				}
			}
		})
	}
}

// benchKeys returns the keys user-0 … user-(n-1), which the benchmarks
// rotate over.
func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("user-%d", i)
	}
	return keys
}
