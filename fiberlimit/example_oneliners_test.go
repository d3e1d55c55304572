package fiberlimit_test

import (
	"fmt"
	"log"
	"net/http/httptest"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/fiberlimit"
	"github.com/ratekit/ratekit/redisstore"
)

// One line limits the whole app: 2 requests per minute per client IP,
// counted in memory. fiberlimit.UseStore(redisstore.New(rdb)) at start-up
// would count them in Redis, for every instance of the app together.
func ExampleLimitByIP() {
	app := fiber.New()
	app.Use(fiberlimit.LimitByIP(2, time.Minute))
	app.Get("/hello", func(c *fiber.Ctx) error { return c.SendString("hello\n") })

	for range 3 {
		res, err := app.Test(httptest.NewRequest(fiber.MethodGet, "/hello", nil))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%d remaining=%s retry-after=%q\n", res.StatusCode, res.Header.Get("X-RateLimit-Remaining"), res.Header.Get("Retry-After"))
	}
	// Output:
	// 200 remaining=1 retry-after=""
	// 200 remaining=0 retry-after=""
	// 429 remaining=0 retry-after="60"
}

// Each API key (X-API-Key header or api_key query parameter) gets 1000
// requests per hour across the group.
func ExampleLimitByAppKey() {
	app := fiber.New()
	api := app.Group("/api", fiberlimit.LimitByAppKey(1000, time.Hour))
	api.Get("/items", func(c *fiber.Ctx) error { return c.JSON([]string{"apple"}) })

	for _, key := range []string{"k1", "k1", "k2"} {
		req := httptest.NewRequest(fiber.MethodGet, "/api/items", nil)
		req.Header.Set("X-API-Key", key)
		res, err := app.Test(req)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(key, res.StatusCode, res.Header.Get("X-RateLimit-Remaining"))
	}
	// Output:
	// k1 200 999
	// k1 200 998
	// k2 200 999
}

// Each user gets 1 report per minute. The authentication middleware comes
// first and stores the user with c.Locals; the limiter reads it there.
func ExampleLimitByUser() {
	auth := func(c *fiber.Ctx) error {
		c.Locals("user", c.Get("X-User")) // a real app checks a session or a token
		return c.Next()
	}
	app := fiber.New()
	app.Get("/reports", auth, fiberlimit.LimitByUser("user", 1, time.Minute), func(c *fiber.Ctx) error {
		return c.SendString("report\n")
	})

	for _, user := range []string{"ada", "ada", "bob"} {
		req := httptest.NewRequest(fiber.MethodGet, "/reports", nil)
		req.Header.Set("X-User", user)
		res, err := app.Test(req)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(user, res.StatusCode)
	}
	// Output:
	// ada 200
	// ada 429
	// bob 200
}

// One line at start-up, before the middleware is built, moves every
// one-liner of the app to Redis, where every instance of the app counts
// together. (Not run: it needs a Redis.)
func ExampleUseStore() {
	rdb := redis.NewClient(&redis.Options{Addr: "redis.internal:6379"})
	fiberlimit.UseStore(redisstore.New(rdb))

	app := fiber.New()
	app.Use(fiberlimit.LimitByIP(100, time.Minute))
	app.Get("/api/items", fiberlimit.LimitByAppKey(1000, time.Hour), func(c *fiber.Ctx) error { return c.JSON([]string{"apple"}) })
	log.Fatal(app.Listen(":8080"))
}
