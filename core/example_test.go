package core_test

import (
	"context"
	"fmt"
	"log"
	"time"
	_ "time/tzdata" // the examples' time zones, wherever they run

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

// A login address that fails 3 times in 15 minutes is locked out for an
// hour, even if it stops trying, and twice as long on each repeat
// offence, up to a day. (WithClock steps time for the example.)
func ExamplePolicy_lockout() {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	limiter, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{
		Name:    "login-ip",
		Rules:   []core.Rule{{Limit: 3, Window: 15 * time.Minute}},
		Lockout: core.Lockout{For: time.Hour, Max: 24 * time.Hour},
	}, core.WithClock(func() time.Time { return now }))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	for i := 1; i <= 4; i++ {
		d, _ := limiter.Allow(ctx, "203.0.113.7")
		fmt.Printf("failure %d: allowed=%v locked=%v retry=%v\n", i, d.Allowed, d.Locked, d.RetryAfter)
	}
	now = now.Add(30 * time.Minute) // past the window, not the lockout
	d, _ := limiter.Allow(ctx, "203.0.113.7")
	fmt.Printf("30m later: allowed=%v locked=%v retry=%v\n", d.Allowed, d.Locked, d.RetryAfter)
	now = now.Add(30 * time.Minute) // the lockout has ended: 3 more failures, then
	for range 4 {
		d, _ = limiter.Allow(ctx, "203.0.113.7")
	}
	fmt.Printf("again: locked=%v retry=%v\n", d.Locked, d.RetryAfter)
	// Output:
	// failure 1: allowed=true locked=false retry=0s
	// failure 2: allowed=true locked=false retry=0s
	// failure 3: allowed=true locked=false retry=0s
	// failure 4: allowed=false locked=true retry=1h0m0s
	// 30m later: allowed=false locked=true retry=30m0s
	// again: locked=true retry=2h0m0s
}

// One million requests a calendar month, counted from 00:00 on the 1st in
// the customer's time zone, alongside 10 a second. (WithClock steps time
// for the example.)
func ExampleRule_calendar() {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		log.Fatal(err)
	}
	now := time.Date(2024, 2, 29, 23, 59, 0, 0, paris)
	limiter, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{
		Name: "api",
		Rules: []core.Rule{
			{Limit: 10, Window: time.Second},
			{Limit: 1_000_000, Calendar: core.Month, Location: paris},
		},
	}, core.WithClock(func() time.Time { return now }))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	d, _ := limiter.AllowN(ctx, "app-42", 5)
	month := d.Rules()[1]
	fmt.Printf("%v: used %d of %d, resets in %v\n", month.Calendar, month.Used, month.Limit, month.ResetAfter)
	now = now.Add(time.Minute) // 1 March, 00:00 in Paris
	d, _ = limiter.Peek(ctx, "app-42")
	month = d.Rules()[1]
	fmt.Printf("%v: used %d of %d, resets in %v\n", month.Calendar, month.Used, month.Limit, month.ResetAfter)
	// Output:
	// month: used 5 of 1000000, resets in 1m0s
	// month: used 0 of 1000000, resets in 743h0m0s
}

// Login protection in steps: from the 3rd attempt in 15 minutes the
// account must solve a CAPTCHA (or give a second factor) first; after
// the 5th it is refused. A challenged attempt counts toward nothing.
func ExampleLimiter_Pass() {
	login, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{
		Name:  "login-account",
		Rules: []core.Rule{{Limit: 5, Window: 15 * time.Minute, Challenge: 3}},
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	for attempt := 1; attempt <= 7; attempt++ {
		d, err := login.Allow(ctx, "alice")
		if err != nil {
			log.Fatal(err)
		}
		if d.Challenged {
			fmt.Printf("attempt %d: challenged\n", attempt)
			// The app shows a CAPTCHA; once it is solved:
			if err := login.Pass(ctx, "alice"); err != nil {
				log.Fatal(err)
			}
			continue
		}
		fmt.Printf("attempt %d: allowed=%v\n", attempt, d.Allowed)
	}
	// Output:
	// attempt 1: allowed=true
	// attempt 2: allowed=true
	// attempt 3: challenged
	// attempt 4: allowed=true
	// attempt 5: allowed=true
	// attempt 6: allowed=true
	// attempt 7: allowed=false
}
