// Command echo shows ratekit on echo with routes limited differently:
//
//   - POST /sms: per phone number (from the JSON body, normalised to
//     E.164) 1 per minute, 5 per hour and 10 per day, in one decision;
//     and, stacked, 20 per hour per client IP.
//   - /api/*: 100 requests per minute per API key, denials as RFC 9457
//     problem+json.
//   - GET /healthz: not limited.
//
// Run it and try it:
//
//	go run ./examples/echo
//	curl -i -d '{"phone":"+1 202-555-0143"}' localhost:8080/sms
//	curl -i -H 'X-API-Key: demo' localhost:8080/api/items
//
// Limits live in memory; set REDIS_URL to keep them in Redis.
package main

import (
	"flag"
	"log"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/echolimit"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/exampleenv"
	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/keyfunc/personal"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	flag.Parse()

	store := exampleenv.Store()
	smsPhone := must(core.NewLimiter(store, core.Policy{Name: "sms-phone", Rules: []core.Rule{
		{Limit: 1, Window: time.Minute},
		{Limit: 5, Window: time.Hour},
		{Limit: 10, Window: 24 * time.Hour},
	}}))
	smsIP := must(core.NewLimiter(store, core.Policy{Name: "sms-ip", Rules: []core.Rule{{Limit: 20, Window: time.Hour}}}))
	quota := must(core.NewLimiter(store, core.Policy{Name: "api", Rules: []core.Rule{{Limit: 100, Window: time.Minute}}}))

	e := echo.New()
	e.HideBanner = true

	// Middlewares run in order: per IP first, then per phone number.
	e.POST("/sms", sendSMS,
		echolimit.New(smsIP, guard.WithKey(keyfunc.ClientIP())),
		echolimit.New(smsPhone, guard.WithKey(personal.Phone(personal.DefaultRegion("US"))), guard.WithNoKey(guard.NoKeyReject)),
	)

	api := e.Group("/api", echolimit.New(quota,
		guard.WithKey(keyfunc.AppKey()),
		guard.WithNoKey(guard.NoKeyReject),
		guard.WithBody(guard.BodyProblem),
	))
	api.GET("/items", func(c echo.Context) error { return c.JSON(http.StatusOK, []string{"apple", "pear"}) })

	e.GET("/healthz", func(c echo.Context) error { return c.String(http.StatusOK, "ok\n") })

	log.Printf("listening on %s: try `curl -i -d '{\"phone\":\"+1 202-555-0143\"}' http://%s/sms` twice", *addr, *addr)
	e.Server.ReadHeaderTimeout = 5 * time.Second
	log.Fatal(e.Start(*addr))
}

// sendSMS reads the body the limiter already looked at: it is still whole.
func sendSMS(c echo.Context) error {
	var req struct {
		Phone string `json:"phone"`
	}
	if err := c.Bind(&req); err != nil {
		return err
	}
	return c.String(http.StatusAccepted, "code sent\n")
}

func must(l *core.Limiter, err error) *core.Limiter {
	if err != nil {
		log.Fatal(err)
	}
	return l
}
