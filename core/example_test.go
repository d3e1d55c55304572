package core_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
)

func ExampleNewLimiter() {
	store := core.NewMemoryStore()
	limiter, err := core.NewLimiter(store, core.Policy{
		Name:  "api",
		Rules: []core.Rule{{Limit: 3, Window: time.Minute}},
	})
	if err != nil {
		log.Fatal(err)
	}
	d, err := limiter.Allow(context.Background(), "client-1")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("allowed=%v remaining=%d\n", d.Allowed, d.Remaining)
	// Output: allowed=true remaining=2
}

func ExampleLimiter_AllowN() {
	limiter, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{
		Name:  "export",
		Rules: []core.Rule{{Limit: 10, Window: time.Minute}},
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	// An expensive request costs 8 units; the next one no longer fits.
	for _, cost := range []int64{8, 8} {
		d, err := limiter.AllowN(ctx, "app-42", cost)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("cost=%d allowed=%v remaining=%d\n", cost, d.Allowed, d.Remaining)
	}
	// Output:
	// cost=8 allowed=true remaining=2
	// cost=8 allowed=false remaining=2
}

func ExampleLimiter_Reset() {
	limiter, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{
		Name:  "login-account",
		Rules: []core.Rule{{Limit: 1, Window: 15 * time.Minute}},
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	first, _ := limiter.Allow(ctx, "alice")
	second, _ := limiter.Allow(ctx, "alice")
	// A successful login clears the account's failures.
	if err := limiter.Reset(ctx, "alice"); err != nil {
		log.Fatal(err)
	}
	third, _ := limiter.Allow(ctx, "alice")
	fmt.Println(first.Allowed, second.Allowed, third.Allowed)
	// Output: true false true
}

// A verification-code policy: 1 per minute AND 5 per hour AND 10 per day,
// checked in one atomic decision.
func ExamplePolicy_sms() {
	sms := core.Policy{
		Name: "sms",
		Rules: []core.Rule{
			{Limit: 1, Window: time.Minute},
			{Limit: 5, Window: time.Hour},
			{Limit: 10, Window: 24 * time.Hour},
		},
	}
	limiter, err := core.NewLimiter(core.NewMemoryStore(), sms)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	first, _ := limiter.Allow(ctx, "+8613800138000")
	second, _ := limiter.Allow(ctx, "+8613800138000")
	fmt.Printf("first=%v second=%v binding=%v retry<=1m:%v\n",
		first.Allowed, second.Allowed, sms.Rules[second.Rule].Window, second.RetryAfter <= time.Minute)
	// Output: first=true second=false binding=1m0s retry<=1m:true
}

// NewRedisStore shares the windows between every instance using the same
// Redis. The client connects on first use; a decision is one script call
// on the key's slot.
func ExampleNewRedisStore() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	store := core.NewRedisStore(rdb)
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
