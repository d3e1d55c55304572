package nethttp_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/nethttp"
)

// Limit one route: at most 2 requests per minute per client IP.
func ExampleNew() {
	limiter, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{
		Name:  "hello",
		Rules: []core.Rule{{Limit: 2, Window: time.Minute}},
	})
	if err != nil {
		log.Fatal(err)
	}

	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "hello\n") })
	mux := http.NewServeMux()
	mux.Handle("GET /hello", nethttp.New(limiter, guard.WithKey(keyfunc.ClientIP()))(hello))

	for range 3 {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/hello", nil))
		fmt.Printf("%d remaining=%s retry-after=%q\n", rec.Code, rec.Header().Get("X-RateLimit-Remaining"), rec.Header().Get("Retry-After"))
	}
	// Output:
	// 200 remaining=1 retry-after=""
	// 200 remaining=0 retry-after=""
	// 429 remaining=0 retry-after="60"
}

// Limit a group of routes by wrapping the sub-mux that serves them: each
// API key gets 100 requests per hour across /api/.
func ExampleNew_group() {
	quota, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{
		Name:  "api",
		Rules: []core.Rule{{Limit: 100, Window: time.Hour}},
	})
	if err != nil {
		log.Fatal(err)
	}

	api := http.NewServeMux()
	api.HandleFunc("GET /api/items", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "items\n") })
	api.HandleFunc("GET /api/users", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "users\n") })

	mux := http.NewServeMux()
	mux.Handle("/api/", nethttp.New(quota, guard.WithKey(keyfunc.AppKey()))(api))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {}) // not limited

	for _, path := range []string{"/api/items", "/api/users", "/api/items?api_key=k2", "/healthz"} {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		if path == "/api/items" || path == "/api/users" {
			req.Header.Set("X-API-Key", "k1")
		}
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		fmt.Printf("%s %d remaining=%q\n", path, rec.Code, rec.Header().Get("X-RateLimit-Remaining"))
	}
	// Output:
	// /api/items 200 remaining="99"
	// /api/users 200 remaining="98"
	// /api/items?api_key=k2 200 remaining="99"
	// /healthz 200 remaining=""
}

// Limit a long download to one in flight per client IP: a second
// download while the first runs is refused, and the first one's lease is
// released when its handler returns.
func ExampleNew_inFlight() {
	downloads, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{Name: "downloads", InFlight: 1})
	if err != nil {
		log.Fatal(err)
	}
	started, finish := make(chan struct{}), make(chan struct{})
	download := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("slow") != "" {
			close(started)
			<-finish
		}
		_, _ = io.WriteString(w, "data\n")
	})
	h := nethttp.New(downloads, guard.WithKey(keyfunc.ClientIP()))(download)

	first := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		h.ServeHTTP(first, httptest.NewRequest(http.MethodGet, "/download?slow=1", nil))
		close(done)
	}()
	<-started
	second := httptest.NewRecorder()
	h.ServeHTTP(second, httptest.NewRequest(http.MethodGet, "/download", nil))
	fmt.Printf("while the first runs: %d retry-after=%s\n", second.Code, second.Header().Get("Retry-After"))

	close(finish)
	<-done
	third := httptest.NewRecorder()
	h.ServeHTTP(third, httptest.NewRequest(http.MethodGet, "/download", nil))
	fmt.Printf("first: %d, after it: %d\n", first.Code, third.Code)
	// Output:
	// while the first runs: 429 retry-after=1
	// first: 200, after it: 200
}

// With chi, limit per client IP and route: the route is the pattern chi
// matched, read with WithRoute, so /users/1 and /users/2 share one budget
// and changing the ID does not dodge it. Add the middleware with r.With or
// inside r.Group, which run after chi has matched the route; under the
// top-level r.Use the pattern is not known yet and keyfunc.Route refuses
// the request (400).
func ExampleWithRoute() {
	limiter, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{
		Name:  "users",
		Rules: []core.Rule{{Limit: 2, Window: time.Minute}},
	})
	if err != nil {
		log.Fatal(err)
	}
	limit := nethttp.New(limiter,
		guard.WithKey(keyfunc.Join(keyfunc.ClientIP(), keyfunc.Route())),
		nethttp.WithRoute(func(r *http.Request) string {
			if rc := chi.RouteContext(r.Context()); rc != nil {
				return rc.RoutePattern() // "/users/{id}"
			}
			return ""
		}),
	)

	r := chi.NewRouter()
	r.With(limit).Get("/users/{id}", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "user "+chi.URLParam(r, "id")+"\n")
	})

	for _, path := range []string{"/users/1", "/users/2", "/users/3"} {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		fmt.Println(path, rec.Code)
	}
	// Output:
	// /users/1 200
	// /users/2 200
	// /users/3 429
}

// userKey is where the example's authentication middleware puts the user.
type userKey struct{}

// Per-user limits after an authentication middleware: it stores the user
// ID in the request context, and keyfunc.UserIDFrom reads it there (gin,
// echo and fiber: c.Set or c.Locals under the same key). Wrap the limiter
// inside the authentication, so that it runs after it. A request without
// a user would have no key and skip the limiter: here the authentication
// refuses it first.
func ExampleNew_perUser() {
	limiter, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{
		Name:  "reports",
		Rules: []core.Rule{{Limit: 2, Window: time.Hour}},
	})
	if err != nil {
		log.Fatal(err)
	}
	authenticate := func(next http.Handler) http.Handler {
		users := map[string]string{"Bearer t-alice": "alice", "Bearer t-bob": "bob"}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			user, ok := users[r.Header.Get("Authorization")]
			if !ok {
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, user)))
		})
	}
	limit := nethttp.New(limiter, guard.WithKey(keyfunc.UserIDFrom(userKey{})))
	reports := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "report\n") })

	mux := http.NewServeMux()
	mux.Handle("GET /reports", authenticate(limit(reports)))

	for _, token := range []string{"t-alice", "t-alice", "t-alice", "t-bob", "nobody"} {
		req := httptest.NewRequest(http.MethodGet, "/reports", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		fmt.Println(token, rec.Code, rec.Header().Get("X-RateLimit-Remaining"))
	}
	// Output:
	// t-alice 200 1
	// t-alice 200 0
	// t-alice 429 0
	// t-bob 200 1
	// nobody 401
}

// Ask for a second factor from the 2nd attempt in 15 minutes, and refuse
// after the 3rd: a challenged request gets the app's own answer, and a
// request that carries the right code records the pass before the limiter
// decides.
func ExampleWithChallengeHandler() {
	limiter, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{
		Name:  "login",
		Rules: []core.Rule{{Limit: 3, Window: 15 * time.Minute, Challenge: 2}},
	})
	if err != nil {
		log.Fatal(err)
	}
	user := keyfunc.Header("X-User")
	limit := nethttp.New(limiter, guard.WithKey(user),
		nethttp.WithChallengeHandler(func(w http.ResponseWriter, _ *http.Request, _ *guard.Verdict) {
			http.Error(w, "send the code we texted you in X-OTP", http.StatusUnauthorized)
		}))
	// A real app checks the code it sent; this one takes "123456".
	verify := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-OTP") == "123456" {
				if key, err := user(keyfunc.FromHTTP(r, "")); err == nil {
					_ = limiter.Pass(r.Context(), key)
				}
			}
			next.ServeHTTP(w, r)
		})
	}
	login := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	h := verify(limit(login))

	for _, otp := range []string{"", "", "123456", "", ""} {
		req := httptest.NewRequest(http.MethodPost, "/login", nil)
		req.Header.Set("X-User", "alice")
		req.Header.Set("X-OTP", otp)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Printf("otp=%q: %d %s", otp, rec.Code, rec.Body)
	}
	// Output:
	// otp="": 200 ok
	// otp="": 401 send the code we texted you in X-OTP
	// otp="123456": 200 ok
	// otp="": 200 ok
	// otp="": 429 rate limit exceeded: retry after 900s
}
