package echolimit_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/echolimit"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/keyfunc/personal"
)

// Limit one route: one verification SMS per phone number per minute. The
// number is read from the JSON body, which the handler can still read.
func ExampleNew() {
	sms, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{
		Name:  "sms",
		Rules: []core.Rule{{Limit: 1, Window: time.Minute}},
	})
	if err != nil {
		log.Fatal(err)
	}

	e := echo.New()
	send := func(c echo.Context) error {
		var req struct{ Phone string }
		if err := c.Bind(&req); err != nil {
			return err
		}
		return c.String(http.StatusAccepted, "code sent\n")
	}
	e.POST("/sms", send, echolimit.New(sms, guard.WithKey(personal.Phone(personal.DefaultRegion("CN")))))

	for _, phone := range []string{"+86 138-0013-8000", "13800138000", "not a number"} {
		req := httptest.NewRequest(http.MethodPost, "/sms", strings.NewReader(`{"phone":"`+phone+`"}`))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		fmt.Printf("%d retry-after=%q %s", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
	// Output:
	// 202 retry-after="" code sent
	// 429 retry-after="60" rate limit exceeded: retry after 60s
	// 400 retry-after="" bad request: invalid phone number
}

// Limit a whole group: each API key gets 100 requests per hour, shared by
// every route of the group.
func ExampleNew_group() {
	quota, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{
		Name:  "api",
		Rules: []core.Rule{{Limit: 100, Window: time.Hour}},
	})
	if err != nil {
		log.Fatal(err)
	}

	e := echo.New()
	api := e.Group("/api", echolimit.New(quota, guard.WithKey(keyfunc.AppKey())))
	api.GET("/items", func(c echo.Context) error { return c.String(http.StatusOK, "items\n") })
	api.GET("/users", func(c echo.Context) error { return c.String(http.StatusOK, "users\n") })

	for _, path := range []string{"/api/items", "/api/users", "/api/items?api_key=k2"} {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		if !strings.Contains(path, "api_key") {
			req.Header.Set("X-API-Key", "k1")
		}
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		fmt.Println(path, rec.Code, "remaining", rec.Header().Get("X-RateLimit-Remaining"))
	}
	// Output:
	// /api/items 200 remaining 99
	// /api/users 200 remaining 98
	// /api/items?api_key=k2 200 remaining 99
}
