package fiberlimit_test

import (
	"fmt"
	"log"
	"net/http/httptest"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/fiberlimit"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/keyfunc"
)

// Limit one route: at most 2 failed logins per minute per client IP;
// successful logins are not counted.
func ExampleNew() {
	login, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{
		Name:  "login",
		Rules: []core.Rule{{Limit: 2, Window: time.Minute}},
	})
	if err != nil {
		log.Fatal(err)
	}

	app := fiber.New()
	app.Post("/login", fiberlimit.New(login,
		guard.WithKey(keyfunc.ClientIP()),
		guard.WithCountIf(func(status int) bool { return status == fiber.StatusUnauthorized }),
	), func(c *fiber.Ctx) error {
		if c.Query("password") != "secret" {
			return fiber.ErrUnauthorized // counted: fiber answers 401
		}
		return c.SendString("welcome")
	})

	for _, password := range []string{"secret", "guess", "secret", "guess", "secret"} {
		res, err := app.Test(httptest.NewRequest(fiber.MethodPost, "/login?password="+password, nil))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s %d retry-after=%q\n", password, res.StatusCode, res.Header.Get("Retry-After"))
	}
	// Output:
	// secret 200 retry-after=""
	// guess 401 retry-after=""
	// secret 200 retry-after=""
	// guess 401 retry-after=""
	// secret 429 retry-after="60"
}

// Limit a group: each API key gets 100 requests per hour across the
// group's routes.
func ExampleNew_group() {
	quota, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{
		Name:  "api",
		Rules: []core.Rule{{Limit: 100, Window: time.Hour}},
	})
	if err != nil {
		log.Fatal(err)
	}

	app := fiber.New()
	api := app.Group("/api", fiberlimit.New(quota, guard.WithKey(keyfunc.AppKey())))
	api.Get("/items", func(c *fiber.Ctx) error { return c.SendString("items") })
	api.Get("/users", func(c *fiber.Ctx) error { return c.SendString("users") })

	for _, path := range []string{"/api/items", "/api/users", "/api/items?api_key=k2"} {
		req := httptest.NewRequest(fiber.MethodGet, path, nil)
		if path != "/api/items?api_key=k2" {
			req.Header.Set("X-API-Key", "k1")
		}
		res, err := app.Test(req)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(path, res.StatusCode, "remaining", res.Header.Get("X-RateLimit-Remaining"))
	}
	// Output:
	// /api/items 200 remaining 99
	// /api/users 200 remaining 98
	// /api/items?api_key=k2 200 remaining 99
}
