package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfunc"
)

func newTestServer(t *testing.T) *echo.Echo {
	t.Helper()
	e, err := newServer(core.NewMemoryStore(), keyfunc.ClientIP())
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// sms posts body with contentType from ip.
func sms(t *testing.T, e *echo.Echo, ip, contentType, body string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/sms", strings.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	req.RemoteAddr = ip + ":40000"
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	return rec
}

const form = "application/x-www-form-urlencoded" // what curl -d sends

func phoneJSON(n string) string { return `{"phone":"` + n + `"}` }
func phoneForm(n string) string { return url.Values{"phone": {n}}.Encode() }

// TestCommands: the commands of the package comment, as curl sends them.
func TestCommands(t *testing.T) {
	e := newTestServer(t)
	if rec := sms(t, e, "192.0.2.1", "application/json", phoneJSON("+1 202-555-0143")); rec.Code != http.StatusAccepted {
		t.Fatalf("JSON: %d %q, want 202", rec.Code, rec.Body)
	}
	// The same number as a form, without the country code: one key.
	rec := sms(t, e, "192.0.2.1", form, phoneForm("202-555-0143"))
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "60" {
		t.Fatalf("form, same number: %d Retry-After %q, want 429 and 60", rec.Code, rec.Header().Get("Retry-After"))
	}
	// JSON sent as curl -d sends it (a form Content-Type) is read too.
	if rec := sms(t, e, "192.0.2.1", form, phoneJSON("+1 202-555-0177")); rec.Code != http.StatusAccepted {
		t.Errorf("JSON with a form Content-Type: %d %q, want 202", rec.Code, rec.Body)
	}
	for _, bad := range []struct{ contentType, body string }{
		{"application/json", phoneJSON("12")},
		{form, "phone="},
		{form, "number=2025550143"},
	} {
		if rec := sms(t, e, "192.0.2.1", bad.contentType, bad.body); rec.Code != http.StatusBadRequest {
			t.Errorf("%s %q: %d, want 400", bad.contentType, bad.body, rec.Code)
		}
	}

	req := httptest.NewRequest(http.MethodGet, "/api/items", nil)
	req.Header.Set("X-API-Key", "demo")
	rec = httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || rec.Header().Get("X-Ratelimit-Remaining") != "99" {
		t.Errorf("GET /api/items: %d %v, want 200 with 99 remaining", rec.Code, rec.Header())
	}
}

// TestPhoneDenialsSpareTheIPBudget: numbers refused by their own limit
// consume nothing of the client's per-IP budget (20 per hour): after 30
// refused resends of one number, the address still sends to 19 new
// numbers, and only the 21st send of the hour is refused by the IP limit.
func TestPhoneDenialsSpareTheIPBudget(t *testing.T) {
	e := newTestServer(t)
	const ip = "198.51.100.9"
	number := func(i int) string { return fmt.Sprintf("+1 202-555-%04d", 100+i) }
	if rec := sms(t, e, ip, "application/json", phoneJSON(number(0))); rec.Code != http.StatusAccepted {
		t.Fatalf("first send: %d, want 202", rec.Code)
	}
	for range 30 {
		if rec := sms(t, e, ip, "application/json", phoneJSON(number(0))); rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "60" {
			t.Fatalf("resend of one number: %d Retry-After %q, want 429 by the phone's 60 s rule", rec.Code, rec.Header().Get("Retry-After"))
		}
	}
	for i := 1; i < 20; i++ {
		if rec := sms(t, e, ip, "application/json", phoneJSON(number(i))); rec.Code != http.StatusAccepted {
			t.Fatalf("new number %d from the address: %d (Retry-After %q), want 202: the IP budget is 20", i, rec.Code, rec.Header().Get("Retry-After"))
		}
	}
	rec := sms(t, e, ip, "application/json", phoneJSON(number(20)))
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "3600" {
		t.Errorf("21st send of the hour: %d Retry-After %q, want 429 by the IP's hourly rule", rec.Code, rec.Header().Get("Retry-After"))
	}
	if rec := sms(t, e, "198.51.100.10", "application/json", phoneJSON(number(21))); rec.Code != http.StatusAccepted {
		t.Errorf("another address: %d, want 202", rec.Code)
	}
}
