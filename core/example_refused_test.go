package core_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/ratekit/ratekit/core"
)

// Support asks who the login limit is refusing right now. On a Redis
// store the counts are summed over every app instance.
func ExampleLimiter_TopRefused() {
	limiter, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{
		Name:  "login-ip",
		Rules: []core.Rule{{Limit: 3, Window: time.Minute}},
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	// One address guesses passwords, another mistypes a few times.
	attempts := []struct {
		ip string
		n  int
	}{{"203.0.113.9", 20}, {"198.51.100.4", 5}, {"192.0.2.1", 2}}
	for _, a := range attempts {
		for range a.n {
			if _, err := limiter.Allow(ctx, a.ip); err != nil {
				log.Fatal(err)
			}
		}
	}
	top, err := limiter.TopRefused(ctx, 10)
	if err != nil {
		log.Fatal(err)
	}
	for _, k := range top {
		fmt.Printf("%s: %d refused\n", k.Key, k.Refusals)
	}
	// Output:
	// 203.0.113.9: 17 refused
	// 198.51.100.4: 2 refused
}
