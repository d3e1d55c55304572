package main

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/redisstore"
)

func get(t *testing.T, h http.Handler, path, peer string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.RemoteAddr = peer + ":40000"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestHello: what the README shows: five 200s, then 429 with Retry-After
// 10; another client and /healthz are not affected.
func TestHello(t *testing.T) {
	h, err := newHandler(core.NewMemoryStore(), keyfunc.ClientIP())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if rec := get(t, h, "/hello", "192.0.2.1"); rec.Code != http.StatusOK || rec.Body.String() != "hello\n" {
			t.Fatalf("request %d: %d %q, want 200 hello", i+1, rec.Code, rec.Body)
		}
	}
	rec := get(t, h, "/hello", "192.0.2.1")
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "10" ||
		rec.Header().Get("X-Ratelimit-Limit") != "5" || rec.Header().Get("X-Ratelimit-Remaining") != "0" {
		t.Errorf("6th request: %d %v, want 429 with Retry-After 10, limit 5, remaining 0", rec.Code, rec.Header())
	}
	if rec := get(t, h, "/hello", "192.0.2.2"); rec.Code != http.StatusOK {
		t.Errorf("another client: %d, want 200", rec.Code)
	}
	for range 10 {
		if rec := get(t, h, "/healthz", "192.0.2.1"); rec.Code != http.StatusOK {
			t.Fatalf("/healthz: %d, want 200 (not limited)", rec.Code)
		}
	}
}

// TestFailurePolicy: with Redis down, -failure-policy closed answers 503,
// open admits everything, local limits each instance on its own.
func TestFailurePolicy(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	srv.Stop()
	for _, tc := range []struct {
		policy core.FailurePolicy
		want   []int // statuses of 7 requests
	}{
		{core.FailClosed, []int{503, 503, 503, 503, 503, 503, 503}},
		{core.FailOpen, []int{200, 200, 200, 200, 200, 200, 200}},
		{core.FailLocal, []int{200, 200, 200, 200, 200, 429, 429}},
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			h, err := newHandler(redisstore.New(rdb), keyfunc.ClientIP(),
				core.WithFailurePolicy(tc.policy))
			if err != nil {
				t.Fatal(err)
			}
			for i, want := range tc.want {
				if rec := get(t, h, "/hello", "192.0.2.1"); rec.Code != want {
					t.Errorf("request %d with Redis down under %v: %d %q, want %d", i+1, tc.policy, rec.Code, rec.Body, want)
				}
			}
		})
	}
}
