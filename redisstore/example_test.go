package redisstore_test

import (
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/redisstore"
)

// New shares the windows between every instance using the same
// Redis. The client connects on first use; a decision is one script call
// on the key's slot.
func ExampleNew() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	store := redisstore.New(rdb)
	limiter, err := core.NewLimiter(store, core.Policy{
		Name:  "login-ip",
		Rules: []core.Rule{{Limit: 10, Window: time.Minute}},
	}, core.WithTimeout(20*time.Millisecond), core.WithFailurePolicy(core.FailLocal))
	if err != nil {
		log.Fatal(err)
	}
	_ = limiter // limiter.Allow(ctx, "203.0.113.7") decides on Redis
	fmt.Println(store.Key("login-ip", "203.0.113.7"))
	// Output: ratekit:login-ip:{203.0.113.7}
}
