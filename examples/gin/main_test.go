package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfunc"
)

func init() {
	gin.SetMode(gin.ReleaseMode)
	gin.DefaultWriter = io.Discard // gin.Default's request log
}

func serve(t *testing.T, h http.Handler, method, path, form string, header ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(form))
	if form != "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded") // as curl -d sends it
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	req.RemoteAddr = "192.0.2.1:40000"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestLogin: what the README shows: five wrong passwords are 401, the
// sixth request is 429 with Retry-After 900, even with the right password.
func TestLogin(t *testing.T) {
	r, err := newRouter(core.NewMemoryStore(), keyfunc.ClientIP())
	if err != nil {
		t.Fatal(err)
	}
	if rec := serve(t, r, http.MethodPost, "/login", "password=secret"); rec.Code != http.StatusOK {
		t.Fatalf("right password: %d, want 200", rec.Code)
	}
	for i := range 5 {
		if rec := serve(t, r, http.MethodPost, "/login", "password=guess"); rec.Code != http.StatusUnauthorized {
			t.Fatalf("wrong password %d: %d, want 401", i+1, rec.Code)
		}
	}
	for _, pw := range []string{"guess", "secret"} {
		rec := serve(t, r, http.MethodPost, "/login", "password="+pw)
		if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "900" {
			t.Errorf("password %q after 5 failures: %d Retry-After %q, want 429 and 900", pw, rec.Code, rec.Header().Get("Retry-After"))
		}
	}
}

// TestAPI: 100 requests per minute per API key with both header styles,
// as the fiber example sends them on the same route; a request without a
// key is refused.
func TestAPI(t *testing.T) {
	r, err := newRouter(core.NewMemoryStore(), keyfunc.ClientIP())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		path := []string{"/api/items", "/api/users"}[i%2]
		if rec := serve(t, r, http.MethodGet, path, "", "X-API-Key", "demo"); rec.Code != http.StatusOK {
			t.Fatalf("request %d: %d, want 200", i+1, rec.Code)
		}
	}
	rec := serve(t, r, http.MethodGet, "/api/items", "", "X-API-Key", "demo")
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("X-Ratelimit-Remaining") != "0" ||
		!strings.Contains(rec.Header().Get("RateLimit"), `"gin-api";r=0;t=60;`) {
		t.Errorf("101st request: %d %v, want 429 with both header styles", rec.Code, rec.Header())
	}
	if rec := serve(t, r, http.MethodGet, "/api/items?api_key=other", ""); rec.Code != http.StatusOK {
		t.Errorf("another key in the query: %d, want 200", rec.Code)
	}
	if rec := serve(t, r, http.MethodGet, "/api/items", ""); rec.Code != http.StatusBadRequest {
		t.Errorf("no API key: %d, want 400", rec.Code)
	}
	if rec := serve(t, r, http.MethodGet, "/healthz", ""); rec.Code != http.StatusOK {
		t.Errorf("/healthz: %d, want 200", rec.Code)
	}
}
