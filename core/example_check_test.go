package core_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/redisstore"
)

// Check the store at start-up: a Redis server whose eviction policy can
// drop limiter keys is reported to the limiter's observers and returned
// as an error wrapping ErrUnsafeEviction. A MemoryStore always passes.
func ExampleLimiter_Check() {
	limiter, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{
		Name:  "login",
		Rules: []core.Rule{{Limit: 10, Window: time.Minute}},
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err = limiter.Check(ctx)
	switch {
	case errors.Is(err, redisstore.ErrUnsafeEviction):
		log.Printf("rate limits can be reset under memory pressure: %v", err)
	case err != nil:
		log.Printf("could not check the store: %v", err)
	default:
		fmt.Println("the store keeps every window")
	}
	// Output: the store keeps every window
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
