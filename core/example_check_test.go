package core_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
)

// Check the Redis server's eviction policy at start-up: a server that can
// evict limiter keys is reported to the limiter's observers and returned.
// This example needs a Redis server, so it has no output check.
func ExampleLimiter_Check() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	limiter, err := core.NewLimiter(core.NewRedisStore(rdb), core.Policy{
		Name:  "login",
		Rules: []core.Rule{{Limit: 10, Window: time.Minute}},
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := limiter.Check(ctx); errors.Is(err, core.ErrUnsafeEviction) {
		log.Printf("rate limits can be reset under memory pressure: %v", err)
	}
}

// A global cap too hot for one Redis node, split over 8 keys in 8 hash
// slots: never more than 100,000 a second in total, at the cost of
// precision (see "Hot keys" in the package documentation).
func ExamplePolicy_shards() {
	global := core.Policy{
		Name:   "global",
		Rules:  []core.Rule{{Limit: 100000, Window: time.Second}},
		Shards: 8,
	}
	limiter, err := core.NewLimiter(core.NewMemoryStore(), global)
	if err != nil {
		log.Fatal(err)
	}
	d, err := limiter.Allow(context.Background(), "all")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(d.Allowed, d.Limit) // the shard's share
	// Output: true 12500
}
