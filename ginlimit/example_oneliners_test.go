package ginlimit_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/ginlimit"
	"github.com/ratekit/ratekit/redisstore"
)

// One line limits the whole engine: 2 requests per minute per client IP,
// counted in memory. ginlimit.UseStore(redisstore.New(rdb)) at start-up
// would count them in Redis, for every instance of the app together.
func ExampleLimitByIP() {
	r := gin.New()
	r.Use(ginlimit.LimitByIP(2, time.Minute))
	r.GET("/hello", func(c *gin.Context) { c.String(http.StatusOK, "hello\n") })

	for range 3 {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/hello", nil))
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
	r := gin.New()
	api := r.Group("/api", ginlimit.LimitByAppKey(1000, time.Hour))
	api.GET("/items", func(c *gin.Context) { c.JSON(http.StatusOK, []string{"apple"}) })

	for _, path := range []string{"/api/items?api_key=k1", "/api/items?api_key=k1", "/api/items?api_key=k2"} {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		fmt.Println(path, rec.Code, rec.Header().Get("X-RateLimit-Remaining"))
	}
	// Output:
	// /api/items?api_key=k1 200 999
	// /api/items?api_key=k1 200 998
	// /api/items?api_key=k2 200 999
}

// Each user gets 1 report per minute. The authentication middleware comes
// first and stores the user with c.Set; the limiter reads it there.
func ExampleLimitByUser() {
	auth := func(c *gin.Context) {
		c.Set("user", c.GetHeader("X-User")) // a real app checks a session or a token
	}
	r := gin.New()
	r.GET("/reports", auth, ginlimit.LimitByUser("user", 1, time.Minute), func(c *gin.Context) {
		c.String(http.StatusOK, "report\n")
	})

	for _, user := range []string{"ada", "ada", "bob"} {
		req := httptest.NewRequest(http.MethodGet, "/reports", nil)
		req.Header.Set("X-User", user)
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req)
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
	ginlimit.UseStore(redisstore.New(rdb))

	r := gin.New()
	r.Use(ginlimit.LimitByIP(100, time.Minute))
	r.GET("/api/items", ginlimit.LimitByAppKey(1000, time.Hour), func(c *gin.Context) { c.JSON(http.StatusOK, []string{"apple"}) })
	log.Fatal(r.Run(":8080"))
}
