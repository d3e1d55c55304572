package core_test

import (
	"context"
	"fmt"
	"log"

	"github.com/ratekit/ratekit/core"
)

// A concurrency limit: at most 2 exports in flight per API key. Each
// admission holds a lease until its decision is refunded, when the export
// ends; the guard's adapters do that after the handler.
func ExamplePolicy_inFlight() {
	exports, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{Name: "exports", InFlight: 2})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	first, _ := exports.Allow(ctx, "key-1")
	second, _ := exports.Allow(ctx, "key-1")
	third, _ := exports.Allow(ctx, "key-1")
	fmt.Println(first.Allowed, second.Allowed, third.Allowed, third.RetryAfter)

	_ = first.Refund(ctx) // the first export ended
	fourth, _ := exports.Allow(ctx, "key-1")
	fmt.Println(fourth.Allowed, fourth.Remaining)
	_ = second.Refund(ctx)
	_ = fourth.Refund(ctx)
	// Output:
	// true true false 1s
	// true 0
}
