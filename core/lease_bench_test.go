package core_test

import (
	"testing"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// BenchmarkInFlight measures an acquire and its release (Allow then
// Refund) under an InFlight policy on the memory store, from one goroutine
// and from GOMAXPROCS goroutines, keys rotating over 4096 so that every
// acquire is admitted (testkit.BenchInFlight; redisstore's: on Redis).
func BenchmarkInFlight(b *testing.B) {
	b.Run("memory", func(b *testing.B) { testkit.BenchInFlight(b, core.NewMemoryStore()) })
}
