package guard_test

import (
	"context"
	"fmt"
	"log"
	"net/http/httptest"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/keyfunc"
)

// A guard is what every adapter runs; an adapter for another framework
// wraps its request in a keyfunc.Request and writes the verdict back.
func ExampleGuard_Admit() {
	l, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{
		Name:  "api",
		Rules: []core.Rule{{Limit: 1, Window: time.Minute}},
	})
	if err != nil {
		log.Fatal(err)
	}
	g := guard.New(l, guard.WithKey(keyfunc.Header("X-Api-Key")))
	for range 2 {
		r := httptest.NewRequest("GET", "/items", nil)
		r.Header.Set("X-Api-Key", "k1")
		v := g.Admit(context.Background(), keyfunc.FromHTTP(r, "/items"))
		v.WriteHeaders(func(name, value string) {
			if name == guard.HeaderRemaining || name == guard.HeaderRetryAfter {
				fmt.Printf("  %s: %s\n", name, value)
			}
		})
		if v.Proceed() {
			fmt.Println("proceed")
			continue
		}
		status, body := v.Answer(func(string, string) {})
		fmt.Printf("%d %s", status, body)
	}
	// Output:
	//   X-Ratelimit-Remaining: 0
	// proceed
	//   X-Ratelimit-Remaining: 0
	//   Retry-After: 60
	// 429 rate limit exceeded: retry after 60s
}

// Login anti-bruteforce counts failures only: a unit is reserved before
// the handler and refunded when the answer is not a 401 or 403.
func ExampleWithCountIf() {
	l, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{
		Name:  "login",
		Rules: []core.Rule{{Limit: 2, Window: 15 * time.Minute}},
	})
	if err != nil {
		log.Fatal(err)
	}
	g := guard.New(l, guard.WithCountIf(guard.StatusAuthFailure))
	ctx := context.Background()
	for _, answer := range []int{200, 200, 401, 401, 200} {
		v := g.Admit(ctx, keyfunc.FromHTTP(httptest.NewRequest("POST", "/login", nil), ""))
		if !v.Proceed() {
			fmt.Println("refused:", v.Status())
			continue
		}
		v.Finish(ctx, answer) // after the handler answered
		fmt.Println("answered", answer)
	}
	// Output:
	// answered 200
	// answered 200
	// answered 401
	// answered 401
	// refused: 429
}
