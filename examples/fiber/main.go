// Command fiber shows ratekit on fiber v2 with routes limited differently:
//
//   - POST /login: 5 failed logins per 15 minutes per client IP; successful
//     logins are not counted (the password is "secret", sent in a form
//     body, never in the URL, where logs and proxies would keep it).
//   - /api/*: 100 requests per minute per API key, told with both the
//     X-RateLimit-* and the IETF RateLimit fields.
//   - GET /healthz: not limited.
//
// Run it and try it:
//
//	go run ./examples/fiber
//	for i in 1 2 3 4 5 6; do curl -s -o /dev/null -w '%{http_code} ' -d password=guess localhost:8086/login; done   # 401 ×5, then 429
//	curl -i -H 'X-API-Key: demo' localhost:8086/api/items
//
// Behind a reverse proxy, name it with -trusted-proxy CIDR[,CIDR] so that
// the client address is read from X-Forwarded-For; without it those
// headers are ignored and every client behind the proxy shares one limit.
// Flags: -addr (127.0.0.1:8086), -trusted-proxy and -failure-policy
// local|open|closed, as in every example. Limits live in memory; set
// REDIS_URL to keep them in Redis.
package main

import (
	"log"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/examples/internal/exampleenv"
	"github.com/ratekit/ratekit/fiberlimit"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/keyfunc"
)

func main() {
	flags := exampleenv.Parse("127.0.0.1:8086", exampleenv.ByIP)
	app, err := newApp(exampleenv.Store(), flags.ClientIP, flags.Options()...)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("listening on %s: try `curl -i -d password=guess http://%s/login` six times", flags.Addr, flags.Addr)
	log.Fatal(app.Listen(flags.Addr))
}

// newApp returns the example's routes, limited on store; clientIP says how
// the client address is found.
func newApp(store core.Store, clientIP keyfunc.Func, opts ...core.Option) (*fiber.App, error) {
	login, err := core.NewLimiter(store, core.Policy{Name: "fiber-login", Rules: []core.Rule{{Limit: 5, Window: 15 * time.Minute}}}, opts...)
	if err != nil {
		return nil, err
	}
	quota, err := core.NewLimiter(store, core.Policy{Name: "fiber-api", Rules: []core.Rule{{Limit: 100, Window: time.Minute}}}, opts...)
	if err != nil {
		return nil, err
	}

	app := fiber.New(fiber.Config{DisableStartupMessage: true, ReadTimeout: 5 * time.Second})

	app.Post("/login", fiberlimit.New(login,
		guard.WithKey(clientIP),
		guard.WithCountIf(func(status int) bool { return status == fiber.StatusUnauthorized }),
	), func(c *fiber.Ctx) error {
		var form struct {
			Password string `form:"password"`
		}
		// BodyParser reads the body only (c.FormValue would also take
		// ?password= from the URL).
		if err := c.BodyParser(&form); err != nil || form.Password != "secret" {
			return fiber.ErrUnauthorized // counted: the limiter sees the 401 the error handler renders
		}
		return c.SendString("welcome\n")
	})

	api := app.Group("/api", fiberlimit.New(quota,
		guard.WithKey(keyfunc.AppKey()),
		guard.WithNoKey(guard.NoKeyReject),
		guard.WithHeaders(guard.HeadersXRateLimit|guard.HeadersIETF),
	))
	api.Get("/items", func(c *fiber.Ctx) error { return c.JSON([]string{"apple", "pear"}) })

	app.Get("/healthz", func(c *fiber.Ctx) error { return c.SendString("ok\n") })
	return app, nil
}
