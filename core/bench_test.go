package core_test

import (
	"testing"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// BenchmarkLimiterAllow measures one decision on the memory store, from
// one goroutine and from GOMAXPROCS goroutines. Keys rotate over 4096 so
// that requests are admitted and each window holds a realistic number of
// entries (testkit.BenchAllow). The Redis drivers' are
// BenchmarkLimiterAllow of redisstore and rueidisstore.
func BenchmarkLimiterAllow(b *testing.B) {
	b.Run("memory", func(b *testing.B) {
		testkit.BenchAllow(b, core.NewMemoryStore())
	})
}

// BenchmarkChallenge measures the decisions of a policy with a Challenge
// (Rule.Challenge) beside the same policy without one, from one
// goroutine, keys rotating over 4096: "plain" has no Challenge; "below"
// has one that is never reached (every decision peeks, then takes);
// "challenged" reaches it at once without a pass (nothing is recorded);
// "passed" reaches it with every key passed (each decision is admitted
// through the pass). On the memory store (redisstore's: on Redis).
func BenchmarkChallenge(b *testing.B) {
	b.Run("memory", func(b *testing.B) {
		testkit.BenchChallenge(b, func(*testing.B) core.Store { return core.NewMemoryStore() })
	})
}
