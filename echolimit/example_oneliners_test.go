package echolimit_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/echolimit"
	"github.com/ratekit/ratekit/redisstore"
)

// One line limits the whole app: 2 requests per minute per client IP,
// counted in memory. echolimit.UseStore(redisstore.New(rdb)) at start-up
// would count them in Redis, for every instance of the app together.
func ExampleLimitByIP() {
	e := echo.New()
	e.Use(echolimit.LimitByIP(2, time.Minute))
	e.GET("/hello", func(c echo.Context) error { return c.String(http.StatusOK, "hello\n") })

	for range 3 {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/hello", nil))
		fmt.Printf("%d remaining=%s retry-after=%q\n", rec.Code, rec.Header().Get("X-RateLimit-Remaining"), rec.Header().Get("Retry-After"))
	}
	// Output:
	// 200 remaining=1 retry-after=""
	// 200 remaining=0 retry-after=""
	// 429 remaining=0 retry-after="60"
}

// Each API key (X-API-Key header or api_key query parameter) gets 1000
// requests per hour across the group.
func ExampleLimitByAppKey() {
	e := echo.New()
	api := e.Group("/api", echolimit.LimitByAppKey(1000, time.Hour))
	api.GET("/items", func(c echo.Context) error { return c.JSON(http.StatusOK, []string{"apple"}) })

	for _, key := range []string{"k1", "k1", "k2"} {
		req := httptest.NewRequest(http.MethodGet, "/api/items", nil)
		req.Header.Set("X-API-Key", key)
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		fmt.Println(key, rec.Code, rec.Header().Get("X-RateLimit-Remaining"))
	}
	// Output:
	// k1 200 999
	// k1 200 998
	// k2 200 999
}

// Each user gets 1 report per minute. The authentication middleware comes
// first and stores the user with c.Set; the limiter reads it there.
func ExampleLimitByUser() {
	auth := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			c.Set("user", c.Request().Header.Get("X-User")) // a real app checks a session or a token
			return next(c)
		}
	}
	e := echo.New()
	e.GET("/reports", func(c echo.Context) error { return c.String(http.StatusOK, "report\n") },
		auth, echolimit.LimitByUser("user", 1, time.Minute))

	for _, user := range []string{"ada", "ada", "bob"} {
		req := httptest.NewRequest(http.MethodGet, "/reports", nil)
		req.Header.Set("X-User", user)
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		fmt.Println(user, rec.Code)
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
	echolimit.UseStore(redisstore.New(rdb))

	e := echo.New()
	e.Use(echolimit.LimitByIP(100, time.Minute))
	e.GET("/api/items", func(c echo.Context) error { return c.JSON(http.StatusOK, []string{"apple"}) }, echolimit.LimitByAppKey(1000, time.Hour))
	log.Fatal(e.Start(":8080"))
}
