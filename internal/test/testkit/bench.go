package testkit

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
)

// The benchmarks of the stores, shared by core's (the memory store) and
// each driver's.

// BenchAllow measures one decision of a limiter on store, from one
// goroutine ("serial") and from GOMAXPROCS goroutines ("parallel"), keys
// rotating over 4096 so that requests are admitted (a deny cache does not
// answer them) and each window holds a realistic number of entries; it
// fails b if a decision falls back.
func BenchAllow(b *testing.B, store core.Store) {
	const nkeys = 4096
	keys := BenchKeys(nkeys)
	l := Limiter(b, store, Policy("bench", core.Rule{Limit: 1000, Window: time.Second}), core.WithTimeout(time.Second))
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
	serialParallel(b, allow)
	if n := fallbacks.Load(); n > 0 {
		b.Errorf("%d decisions fell back: the store did not answer within the timeout", n)
	}
}

// serialParallel measures op(i) for i counting up, from one goroutine
// ("serial") and from GOMAXPROCS goroutines ("parallel"), each of these
// counting from an offset of its own so that they spread over the keys.
func serialParallel(b *testing.B, op func(i uint64)) {
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for i := uint64(0); b.Loop(); i++ {
			op(i)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		var next atomic.Uint64
		b.RunParallel(func(pb *testing.PB) {
			i := next.Add(1) * 7919
			for pb.Next() {
				op(i)
				i++
			}
		})
	})
}

// BenchChallenge measures the decisions of a policy with a Challenge
// beside the same policy without one, on stores made by newStore, from
// one goroutine, keys rotating over 4096: "plain" has no Challenge;
// "below" has one that is never reached; "challenged" reaches it at once
// without a pass; "passed" reaches it with every key passed.
func BenchChallenge(b *testing.B, newStore func(b *testing.B) core.Store) {
	const (
		nkeys = 4096
		limit = 100_000
	)
	keys := BenchKeys(nkeys)
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
			l := Limiter(b, newStore(b), Policy("bench-"+bc.name, core.Rule{Limit: limit, Window: time.Minute, Challenge: bc.challenge}),
				core.WithTimeout(time.Second))
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

// BenchKeys returns the keys user-0 … user-(n-1), which the benchmarks
// rotate over.
func BenchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("user-%d", i)
	}
	return keys
}

// BenchInFlight measures an acquire and its release (Allow then Refund)
// under an InFlight policy on store, from one goroutine and from
// GOMAXPROCS goroutines, keys rotating over 4096 so that every acquire is
// admitted.
func BenchInFlight(b *testing.B, store core.Store) {
	const nkeys = 4096
	keys := BenchKeys(nkeys)
	l := Limiter(b, store, core.Policy{Name: "bench-inflight", InFlight: 1000}, core.WithTimeout(time.Second))
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
	serialParallel(b, cycle)
	if n := bad.Load(); n > 0 {
		b.Errorf("%d acquires were denied or fell back", n)
	}
}

// BenchCluster measures decisions per second on store, a store of a
// Redis Cluster with the given number of masters: 64 goroutines
// (RunParallel) decide keys spread evenly over the masters (4,096 keys),
// and it reports decisions/s in all and per master.
func BenchCluster(b *testing.B, store core.Store, masters int) {
	const (
		nkeys      = 4096
		goroutines = 64
	)
	keys := BenchKeys(nkeys)
	l := Limiter(b, store, Policy("bench", core.Rule{Limit: 1000, Window: time.Second}), core.WithTimeout(time.Second))
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
