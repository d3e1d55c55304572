// Command fiber shows ratekit on fiber v2 with routes limited differently:
//
//   - POST /login: 5 failed logins per 15 minutes per client IP; successful
//     logins are not counted (try password "secret").
//   - /api/*: 100 requests per minute per API key, told with both the
//     X-RateLimit-* and the IETF RateLimit fields.
//   - GET /healthz: not limited.
//
// Behind a reverse proxy, name it with -trusted-proxy so that the client
// address is read from X-Forwarded-For; without it those
// headers are ignored and every client behind the proxy shares one limit.
//
//	go run ./examples/fiber
//	curl -i -X POST 'localhost:8080/login?password=guess'
//	curl -i -H 'X-API-Key: demo' localhost:8080/api/items
//
// Limits live in memory; set REDIS_URL to keep them in Redis.
package main

import (
	"flag"
	"log"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/fiberlimit"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/exampleenv"
	"github.com/ratekit/ratekit/keyfunc"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	proxy := flag.String("trusted-proxy", "", "CIDR of the reverse proxies in front of this server, e.g. 10.0.0.0/8")
	flag.Parse()

	clientIP := exampleenv.ClientIP(*proxy)

	store := exampleenv.Store()
	login := must(core.NewLimiter(store, core.Policy{Name: "login-ip", Rules: []core.Rule{{Limit: 5, Window: 15 * time.Minute}}}))
	quota := must(core.NewLimiter(store, core.Policy{Name: "api", Rules: []core.Rule{{Limit: 100, Window: time.Minute}}}))

	app := fiber.New()

	app.Post("/login", fiberlimit.New(login,
		guard.WithKey(clientIP),
		guard.WithCountIf(func(status int) bool { return status == fiber.StatusUnauthorized }),
	), func(c *fiber.Ctx) error {
		if c.Query("password") != "secret" {
			return fiber.ErrUnauthorized // counted: the limiter sees the 401
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

	log.Printf("listening on %s: try `curl -i -X POST 'http://%s/login?password=guess'` six times", *addr, *addr)
	log.Fatal(app.Listen(*addr))
}

func must(l *core.Limiter, err error) *core.Limiter {
	if err != nil {
		log.Fatal(err)
	}
	return l
}
