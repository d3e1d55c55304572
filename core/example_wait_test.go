package core_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/ratekit/ratekit/core"
)

// Wait admits a request once it fits instead of refusing it: here the
// third request of a limit of 2 per 100 ms waits for the first to leave
// the window. A wait that would end after the context's deadline fails at
// once.
func ExampleLimiter_Wait() {
	limiter, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{
		Name:  "sms-provider",
		Rules: []core.Rule{{Limit: 2, Window: 100 * time.Millisecond}},
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	start := time.Now()
	for range 3 {
		d, err := limiter.Wait(ctx, "provider")
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("allowed:", d.Allowed)
	}
	fmt.Println("waited at least 100 ms:", time.Since(start) >= 100*time.Millisecond)

	daily, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{
		Name:  "partner-daily",
		Rules: []core.Rule{{Limit: 1, Window: 24 * time.Hour}},
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, _ = daily.Wait(ctx, "partner")
	_, err = daily.Wait(ctx, "partner")
	fmt.Println("would exceed the deadline:", errors.Is(err, context.DeadlineExceeded), ctx.Err() == nil)
	// Output:
	// allowed: true
	// allowed: true
	// allowed: true
	// waited at least 100 ms: true
	// would exceed the deadline: true true
}
