package opshttp_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/opshttp"
)

func ExampleHandler() {
	login, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{Name: "login", Rules: []core.Rule{{Limit: 1, Window: 15 * time.Minute}}})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	// Mount it behind the app's own admin authentication.
	mux.Handle("/admin/ratelimit/", http.StripPrefix("/admin/ratelimit", opshttp.Handler([]*core.Limiter{login})))

	_, _ = login.Allow(context.Background(), "alice") // alice used her one attempt
	for _, req := range []*http.Request{
		httptest.NewRequest(http.MethodGet, "/admin/ratelimit/policies", nil),
		httptest.NewRequest(http.MethodDelete, "/admin/ratelimit/policies/login/keys/alice", nil),
		httptest.NewRequest(http.MethodGet, "/admin/ratelimit/policies/nope", nil),
	} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		fmt.Println(strings.TrimSpace(fmt.Sprint(req.Method, " ", req.URL.Path, " ", rec.Code, " ", rec.Body.String())))
	}
	// Output:
	// GET /admin/ratelimit/policies 200 [{"name":"login","algorithm":"SlidingLog","rules":[{"limit":1,"window":"15m0s","window_seconds":900}]}]
	// DELETE /admin/ratelimit/policies/login/keys/alice 204
	// GET /admin/ratelimit/policies/nope 404 {"error":"unknown policy"}
}
