package redisstore_test

import (
	"testing"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/redisstore"
)

// BenchmarkLimiterAllow measures one decision on the store, from one
// goroutine and from GOMAXPROCS goroutines (see testkit.BenchAllow; core's
// BenchmarkLimiterAllow measures the memory store's, rueidisstore's the
// other driver's).
func BenchmarkLimiterAllow(b *testing.B) {
	b.Run("redis", func(b *testing.B) {
		srv := redistest.Start(b) // skipped with -short
		testkit.BenchAllow(b, redisstore.New(srv.Client(b)))
	})
	// The same with one script call per decision: the baseline of
	// WithBatching's promise that a lone caller is no slower.
	b.Run("redis-unbatched", func(b *testing.B) {
		srv := redistest.Start(b)
		testkit.BenchAllow(b, redisstore.New(srv.Client(b), redisstore.WithBatching(1)))
	})
}

// BenchmarkChallenge measures the decisions of a policy with a Challenge
// beside the same policy without one (see testkit.BenchChallenge).
func BenchmarkChallenge(b *testing.B) {
	b.Run("redis", func(b *testing.B) {
		srv := redistest.Start(b) // skipped with -short
		testkit.BenchChallenge(b, func(b *testing.B) core.Store { return redisstore.New(srv.Client(b)) })
	})
}

// BenchmarkInFlight measures an acquire and its release under an InFlight
// policy (see testkit.BenchInFlight).
func BenchmarkInFlight(b *testing.B) {
	b.Run("redis", func(b *testing.B) {
		srv := redistest.Start(b) // skipped with -short
		testkit.BenchInFlight(b, redisstore.New(srv.Client(b)))
	})
}

// BenchmarkClusterPerMaster measures decisions per second on the local
// Cluster of three masters, with the client's default options: 64
// goroutines (RunParallel) decide keys spread evenly over the masters
// (4,096 keys, each master a third), batching on. It reports decisions/s
// in all and per master (the total over three). Every master is a
// redis-server on the same machine as the benchmark, so the figure is
// bounded by that machine's cores, not by Redis.
func BenchmarkClusterPerMaster(b *testing.B) {
	c := redistest.StartCluster(b) // skipped with -short
	b.Run("redis", func(b *testing.B) {
		testkit.BenchCluster(b, redisstore.New(c.Client(b), redisstore.WithPrefix("bench-cluster")), 3)
	})
}
