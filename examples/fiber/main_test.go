package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfunc"
)

func do(t *testing.T, app *fiber.App, method, path, form string, header ...string) (*http.Response, string) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(form))
	if form != "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded") // as curl -d sends it
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := app.Test(req, -1)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(b)
}

func newTestApp(t *testing.T) *fiber.App {
	t.Helper()
	app, err := newApp(core.NewMemoryStore(), keyfunc.ClientIP())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = app.Shutdown() })
	return app
}

// TestLogin: the password comes in a form body; five wrong ones are 401
// and the sixth request 429 with Retry-After 900; a password in the query
// string is not read.
func TestLogin(t *testing.T) {
	app := newTestApp(t)
	if res, body := do(t, app, http.MethodPost, "/login", "password=secret"); res.StatusCode != http.StatusOK || body != "welcome\n" {
		t.Fatalf("right password: %d %q, want 200", res.StatusCode, body)
	}
	if res, _ := do(t, app, http.MethodPost, "/login?password=secret", ""); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("password in the query string: %d, want 401 (not read)", res.StatusCode)
	}
	for i := range 4 {
		if res, _ := do(t, app, http.MethodPost, "/login", "password=guess"); res.StatusCode != http.StatusUnauthorized {
			t.Fatalf("wrong password %d: %d, want 401", i+2, res.StatusCode)
		}
	}
	res, _ := do(t, app, http.MethodPost, "/login", "password=secret")
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") != "900" {
		t.Errorf("after 5 failures: %d Retry-After %q, want 429 and 900", res.StatusCode, res.Header.Get("Retry-After"))
	}
}

// TestAPI: 100 requests per minute per API key, with both header styles.
func TestAPI(t *testing.T) {
	app := newTestApp(t)
	for i := range 100 {
		if res, _ := do(t, app, http.MethodGet, "/api/items", "", "X-API-Key", "demo"); res.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d, want 200", i+1, res.StatusCode)
		}
	}
	res, _ := do(t, app, http.MethodGet, "/api/items", "", "X-API-Key", "demo")
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("X-Ratelimit-Remaining") != "0" ||
		!strings.HasPrefix(res.Header.Get("RateLimit"), `"fiber-api";r=0;`) {
		t.Errorf("101st request: %d %v, want 429 with both header styles", res.StatusCode, res.Header)
	}
	if res, _ := do(t, app, http.MethodGet, "/api/items", ""); res.StatusCode != http.StatusBadRequest {
		t.Errorf("no API key: %d, want 400", res.StatusCode)
	}
	if res, _ := do(t, app, http.MethodGet, "/healthz", ""); res.StatusCode != http.StatusOK {
		t.Errorf("/healthz: %d, want 200", res.StatusCode)
	}
}
