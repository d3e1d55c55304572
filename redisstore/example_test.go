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

// ExampleWithWaitReplicas makes each admission wait until the key's
// master has passed it to one replica, or 20 ms have passed, so that a
// Sentinel failover loses at most the admissions in flight. The limiter's
// timeout leaves room for the wait.
func ExampleWithWaitReplicas() {
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    "mymaster",
		SentinelAddrs: []string{"sentinel-1:26379", "sentinel-2:26379", "sentinel-3:26379"},
	})
	defer rdb.Close()
	store := redisstore.New(rdb, redisstore.WithWaitReplicas(1, 20*time.Millisecond))
	limiter, err := core.NewLimiter(store, core.Policy{
		Name:  "sms",
		Rules: []core.Rule{{Limit: 1, Window: time.Minute}, {Limit: 5, Window: time.Hour}},
	}, core.WithTimeout(50*time.Millisecond))
	if err != nil {
		panic(err)
	}
	_ = limiter
	// Export how many admissions no replica acknowledged in time.
	waits, short := store.ReplicaWaits()
	fmt.Println(waits, short)
	// Output: 0 0
}
