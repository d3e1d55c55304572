package opshttp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfunc/personal"
	"github.com/ratekit/ratekit/opshttp"
)

// requireToken is an app's admin check: a bearer token.
func requireToken(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func ExampleHandler() {
	login, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{Name: "login", Rules: []core.Rule{{Limit: 1, Window: 15 * time.Minute}}})
	if err != nil {
		log.Fatal(err)
	}
	// The handler serves every request through the app's admin check
	// (requireToken), and refuses to start without one.
	mux := http.NewServeMux()
	mux.Handle("/admin/ratelimit/", http.StripPrefix("/admin/ratelimit",
		opshttp.Handler([]*core.Limiter{login}, opshttp.WithAuthorization(requireToken))))

	_, _ = login.Allow(context.Background(), "alice") // alice used her one attempt
	for i, req := range []*http.Request{
		httptest.NewRequest(http.MethodDelete, "/admin/ratelimit/policies/login/keys/alice", nil), // without the token
		httptest.NewRequest(http.MethodGet, "/admin/ratelimit/policies", nil),
		httptest.NewRequest(http.MethodDelete, "/admin/ratelimit/policies/login/keys/alice", nil),
		httptest.NewRequest(http.MethodGet, "/admin/ratelimit/policies/nope", nil),
	} {
		if i > 0 {
			req.Header.Set("Authorization", "Bearer s3cret")
		}
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		fmt.Println(strings.TrimSpace(fmt.Sprint(req.Method, " ", req.URL.Path, " ", rec.Code, " ", rec.Body.String())))
	}
	// Output:
	// DELETE /admin/ratelimit/policies/login/keys/alice 401 unauthorized
	// GET /admin/ratelimit/policies 200 [{"name":"login","algorithm":"SlidingLog","rules":[{"limit":1,"window":"15m0s","window_seconds":900}]}]
	// DELETE /admin/ratelimit/policies/login/keys/alice 204
	// GET /admin/ratelimit/policies/nope 404 {"error":"unknown policy"}
}

func ExampleWithKeyer() {
	// The app keys its login limit by account, with package
	// keyfunc/personal: the store holds an HMAC of the name.
	secret := []byte("the app's secret")
	opts := []personal.Option{personal.Secret(secret)}
	login, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{Name: "login-account", Rules: []core.Rule{{Limit: 1, Window: 15 * time.Minute}}})
	if err != nil {
		log.Fatal(err)
	}
	admin := opshttp.Handler([]*core.Limiter{login},
		opshttp.WithAuthorization(requireToken),
		// Support staff give the account name; the handler derives the
		// stored key as the app does.
		opshttp.WithKeyer("login-account", func(id string) (string, error) {
			return personal.AccountKey(id, opts...)
		}))
	mux := http.NewServeMux()
	mux.Handle("/admin/ratelimit/", http.StripPrefix("/admin/ratelimit", admin))

	key, _ := personal.AccountKey("alice@example.com", opts...) // what the app stores
	_, _ = login.Allow(context.Background(), key)               // alice used her one attempt
	for _, req := range []*http.Request{
		httptest.NewRequest(http.MethodGet, "/admin/ratelimit/policies/login-account/keys/Alice@Example.com", nil),
		httptest.NewRequest(http.MethodDelete, "/admin/ratelimit/policies/login-account/keys/Alice@Example.com", nil),
	} {
		req.Header.Set("Authorization", "Bearer s3cret")
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		if req.Method == http.MethodGet {
			var st opshttp.KeyState
			_ = json.Unmarshal(rec.Body.Bytes(), &st)
			fmt.Println(req.Method, rec.Code, "allowed:", st.Allowed)
		} else {
			fmt.Println(req.Method, rec.Code)
		}
	}
	d, _ := login.Allow(context.Background(), key)
	fmt.Println("alice can log in again:", d.Allowed)
	// Output:
	// GET 200 allowed: false
	// DELETE 204
	// alice can log in again: true
}

func ExampleNewPage() {
	login, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{
		Name:    "login-ip",
		Rules:   []core.Rule{{Limit: 1, Window: 15 * time.Minute}},
		Lockout: core.Lockout{For: time.Hour},
	})
	if err != nil {
		log.Fatal(err)
	}
	// The app's own admin check; here HTTP Basic, which a browser asks
	// for.
	requireAdmin := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if user, pass, ok := r.BasicAuth(); !ok || user != "admin" || pass != "s3cret" {
				w.Header().Set("WWW-Authenticate", `Basic realm="ops"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	if _, err := opshttp.NewPage([]*core.Limiter{login}); err != nil {
		fmt.Println(err) // the page refuses to start without the check
	}
	page, err := opshttp.NewPage([]*core.Limiter{login},
		opshttp.WithAuthorization(requireAdmin),
		// Each reset from the page, with the request's context.
		opshttp.WithObserver(core.ObserverFunc(func(_ context.Context, e core.Event) {
			if e.Kind == opshttp.EventReset {
				log.Printf("ratekit: %s key reset from the operations page", e.Policy)
			}
		})))
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/admin/ops/", http.StripPrefix("/admin/ops", page))

	for range 2 { // the second attempt locks the address out
		_, _ = login.Allow(context.Background(), "192.0.2.1")
	}
	for _, admin := range []bool{false, true} {
		req := httptest.NewRequest(http.MethodGet, "/admin/ops/?q=192.0.2.1", nil)
		if admin {
			req.SetBasicAuth("admin", "s3cret")
		}
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		fmt.Println(rec.Code, strings.Contains(rec.Body.String(), "Locked out until"))
	}
	// Output:
	// ratekit: opshttp: NewPage: no WithAuthorization option: the page resets limits, so it must sit behind the app's admin check
	// 401 false
	// 200 true
}
