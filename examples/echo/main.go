// Command echo shows ratekit on echo with routes limited differently:
//
//   - POST /sms: per phone number (normalised to E.164, read from a JSON
//     body or a form) 1 per minute, 5 per hour and 10 per day, AND 20 per
//     hour per client IP, decided together: a request one of them denies
//     consumes nothing from the other, so numbers that are refused do not
//     use up the address's budget for new ones.
//   - /api/*: 100 requests per minute per API key, denials as RFC 9457
//     problem+json.
//   - GET /healthz: not limited.
//
// Run it and try it (a number without a country code is read as a US one):
//
//	go run ./examples/echo
//	curl -i -H 'Content-Type: application/json' -d '{"phone":"+1 202-555-0143"}' localhost:8085/sms   # 202
//	curl -i --data-urlencode 'phone=202-555-0143' localhost:8085/sms                                     # 429, Retry-After: 60
//	curl -i -H 'X-API-Key: demo' localhost:8085/api/items
//
// (In a form, "+" means a space: --data-urlencode encodes it.) Flags:
// -addr (127.0.0.1:8085), -trusted-proxy CIDR[,CIDR] and -failure-policy
// local|open|closed, as in every example. Limits live in memory; set
// REDIS_URL to keep them in Redis. examples/sms is the full version of
// this route: a global cap, hashed keys, and no charge for undelivered
// codes.
package main

import (
	"log"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/echolimit"
	"github.com/ratekit/ratekit/examples/internal/exampleenv"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/keyfunc/personal"
)

func main() {
	flags := exampleenv.Parse("127.0.0.1:8085", exampleenv.ByIP)
	e, err := newServer(exampleenv.Store(), flags.ClientIP, flags.Options()...)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("listening on %s: try `curl -i -H 'Content-Type: application/json' -d '{\"phone\":\"+1 202-555-0143\"}' http://%s/sms` twice", flags.Addr, flags.Addr)
	e.Server.ReadHeaderTimeout = 5 * time.Second
	log.Fatal(e.Start(flags.Addr))
}

// newServer returns the example's routes, limited on store; clientIP says
// how the client address is found.
func newServer(store core.Store, clientIP keyfunc.Func, opts ...core.Option) (*echo.Echo, error) {
	smsPhone, err := core.NewLimiter(store, core.Policy{Name: "echo-sms-phone", Rules: []core.Rule{
		{Limit: 1, Window: time.Minute},
		{Limit: 5, Window: time.Hour},
		{Limit: 10, Window: 24 * time.Hour},
	}}, opts...)
	if err != nil {
		return nil, err
	}
	smsIP, err := core.NewLimiter(store, core.Policy{Name: "echo-sms-ip", Rules: []core.Rule{{Limit: 20, Window: time.Hour}}}, opts...)
	if err != nil {
		return nil, err
	}
	quota, err := core.NewLimiter(store, core.Policy{Name: "echo-api", Rules: []core.Rule{{Limit: 100, Window: time.Minute}}}, opts...)
	if err != nil {
		return nil, err
	}

	e := echo.New()
	e.HideBanner = true
	region := personal.DefaultRegion("US")
	// The handler reads the number as the limiter does, wherever it is.
	number := personal.Phone(region, personal.Cleartext(true))

	// One middleware, two limits decided together (not two middlewares
	// in a row, where a number denied by the second would still have
	// spent the address's unit in the first).
	e.POST("/sms", func(c echo.Context) error {
		if _, err := number(keyfunc.FromHTTP(c.Request(), c.Path())); err != nil {
			return c.String(http.StatusBadRequest, "a valid phone number is required\n")
		}
		return c.String(http.StatusAccepted, "code sent\n") // a real service sends it here
	}, echolimit.New(smsPhone,
		guard.WithKey(personal.Phone(region)),
		guard.WithNoKey(guard.NoKeyReject),
		guard.WithAlso(smsIP, clientIP),
	))

	api := e.Group("/api", echolimit.New(quota,
		guard.WithKey(keyfunc.AppKey()),
		guard.WithNoKey(guard.NoKeyReject),
		guard.WithBody(guard.BodyProblem),
	))
	api.GET("/items", func(c echo.Context) error { return c.JSON(http.StatusOK, []string{"apple", "pear"}) })

	e.GET("/healthz", func(c echo.Context) error { return c.String(http.StatusOK, "ok\n") })
	return e, nil
}
