package rueidisstore_test

import (
	"testing"

	"github.com/redis/rueidis"

	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/rueidisstore"
)

// BenchmarkLimiterAllow measures one decision on the store, on rueidis
// with its default options, from one goroutine and from GOMAXPROCS
// goroutines (see testkit.BenchAllow; redisstore's BenchmarkLimiterAllow
// measures go-redis's).
func BenchmarkLimiterAllow(b *testing.B) {
	b.Run("rueidis", func(b *testing.B) {
		srv := redistest.Start(b) // skipped with -short
		client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(client.Close)
		store := rueidisstore.New(client)
		b.Cleanup(store.Close)
		testkit.BenchAllow(b, store)
	})
}

// BenchmarkClusterPerMaster measures decisions per second on the local
// Cluster of three masters, with rueidis's default options (see
// redisstore's BenchmarkClusterPerMaster and testkit.BenchCluster).
func BenchmarkClusterPerMaster(b *testing.B) {
	c := redistest.StartCluster(b) // skipped with -short
	b.Run("rueidis", func(b *testing.B) {
		client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: c.Addrs()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(client.Close)
		store := rueidisstore.New(client, rueidisstore.WithPrefix("bench-cluster"))
		b.Cleanup(store.Close)
		testkit.BenchCluster(b, store, 3)
	})
}
