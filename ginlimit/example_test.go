package ginlimit_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/ginlimit"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/keyfunc"
)

// Limit one route: at most 2 login attempts per minute per client IP.
func ExampleNew() {
	login, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{
		Name:  "login",
		Rules: []core.Rule{{Limit: 2, Window: time.Minute}},
	})
	if err != nil {
		log.Fatal(err)
	}

	r := gin.New()
	r.POST("/login", ginlimit.New(login, guard.WithKey(keyfunc.ClientIP())), func(c *gin.Context) {
		c.String(http.StatusOK, "welcome\n")
	})

	for range 3 {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/login", nil))
		fmt.Printf("%d remaining=%s retry-after=%q\n", rec.Code, rec.Header().Get("X-RateLimit-Remaining"), rec.Header().Get("Retry-After"))
	}
	// Output:
	// 200 remaining=1 retry-after=""
	// 200 remaining=0 retry-after=""
	// 429 remaining=0 retry-after="60"
}

// Limit a whole group: each API key gets 100 requests per hour, told
// with the IETF RateLimit header fields.
func ExampleNew_group() {
	quota, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{
		Name:  "api",
		Rules: []core.Rule{{Limit: 100, Window: time.Hour}},
	})
	if err != nil {
		log.Fatal(err)
	}

	r := gin.New()
	api := r.Group("/api", ginlimit.New(quota,
		guard.WithKey(keyfunc.AppKey()),
		guard.WithHeaders(guard.HeadersIETF),
		guard.WithNoKey(guard.NoKeyReject),
	))
	api.GET("/items", func(c *gin.Context) { c.String(http.StatusOK, "items\n") })
	api.GET("/users", func(c *gin.Context) { c.String(http.StatusOK, "users\n") })

	for _, path := range []string{"/api/items", "/api/users", "/api/items?api_key=k2"} {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		if path != "/api/items?api_key=k2" {
			req.Header.Set("X-API-Key", "k1")
		}
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req)
		fmt.Println(rec.Code, rec.Header().Get("RateLimit"))
	}
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/items", nil))
	fmt.Println(rec.Code, "without a key")
	// Output:
	// 200 "api";r=99;t=3600;pk=:+ASA5w2P8Ui/:
	// 200 "api";r=98;t=3600;pk=:+ASA5w2P8Ui/:
	// 200 "api";r=99;t=3600;pk=:cspC7NZS2ZFJ:
	// 400 without a key
}
