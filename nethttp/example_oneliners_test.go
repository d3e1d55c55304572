package nethttp_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/nethttp"
	"github.com/ratekit/ratekit/redisstore"
)

// One line limits a route: 2 requests per minute per client IP, counted in
// memory. nethttp.UseStore(redisstore.New(rdb)) at start-up would count
// them in Redis, for every instance of the app together.
func ExampleLimitByIP() {
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "hello\n") })
	mux := http.NewServeMux()
	mux.Handle("GET /hello", nethttp.LimitByIP(2, time.Minute)(hello))

	for range 3 {
		rec := httptest.NewRecorder()
		// httptest.NewRequest comes from 192.0.2.1; a request made with
		// http.NewRequest has no address and would be refused (400).
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/hello", nil))
		fmt.Printf("%d remaining=%s retry-after=%q\n", rec.Code, rec.Header().Get("X-RateLimit-Remaining"), rec.Header().Get("Retry-After"))
	}
	// Output:
	// 200 remaining=1 retry-after=""
	// 200 remaining=0 retry-after=""
	// 429 remaining=0 retry-after="60"
}

// Each API key (X-API-Key header or api_key query parameter) gets 1000
// requests per hour across /api/.
func ExampleLimitByAppKey() {
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "items\n") })
	mux := http.NewServeMux()
	mux.Handle("/api/", nethttp.LimitByAppKey(1000, time.Hour)(api))

	for _, key := range []string{"k1", "k1", "k2"} {
		req := httptest.NewRequest(http.MethodGet, "/api/items", nil)
		req.Header.Set("X-API-Key", key)
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		fmt.Println(key, rec.Code, rec.Header().Get("X-RateLimit-Remaining"))
	}
	// Output:
	// k1 200 999
	// k1 200 998
	// k2 200 999
}

// Each user gets 1 report per minute. The limiter runs inside the
// authentication middleware, which puts the user in the request context;
// put before it, it would find no user and limit nothing.
func ExampleLimitByUser() {
	authenticate := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			user := r.Header.Get("X-User") // a real app checks a session or a token
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, user)))
		})
	}
	reports := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "report\n") })
	mux := http.NewServeMux()
	mux.Handle("GET /reports", authenticate(nethttp.LimitByUser(userKey{}, 1, time.Minute)(reports)))

	for _, user := range []string{"ada", "ada", "bob"} {
		req := httptest.NewRequest(http.MethodGet, "/reports", nil)
		req.Header.Set("X-User", user)
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
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
	nethttp.UseStore(redisstore.New(rdb))

	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "hello\n") })
	mux := http.NewServeMux()
	mux.Handle("GET /hello", nethttp.LimitByIP(100, time.Minute)(hello))
	mux.Handle("GET /api/items", nethttp.LimitByAppKey(1000, time.Hour)(hello))
	log.Fatal(http.ListenAndServe(":8080", mux))
}
