package opshttp_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
	_ "time/tzdata" // the tests' time zones, wherever they run

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/opshttp"
)

// TestPeekLockout: a key locked out peeks as locked, until when, whatever
// its rules hold; a reset lifts the lockout.
func TestPeekLockout(t *testing.T) {
	ctx := context.Background()
	l := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "login-ip",
		Rules: []core.Rule{{Limit: 2, Window: time.Second}}, Lockout: core.Lockout{For: 24 * time.Hour}})
	srv := httptest.NewServer(opshttp.Handler([]*core.Limiter{l}, anyone))
	t.Cleanup(srv.Close)
	for range 3 {
		if _, err := l.Allow(ctx, "192.0.2.1"); err != nil {
			t.Fatal(err)
		}
	}
	peek := func() opshttp.KeyState {
		t.Helper()
		resp, err := http.Get(srv.URL + "/policies/login-ip/keys/192.0.2.1")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var st opshttp.KeyState
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || resp.StatusCode != 200 {
			t.Fatalf("peek: status %d, %v", resp.StatusCode, err)
		}
		return st
	}
	before := time.Now()
	st := peek()
	until, err := time.Parse(time.RFC3339, st.LockedUntil)
	if err != nil || !st.Locked || st.Allowed || st.Remaining != 0 ||
		until.Before(before.Add(24*time.Hour-2*time.Second)) || until.After(time.Now().Add(24*time.Hour+time.Second)) {
		t.Errorf("peek of a key locked out = %+v (%v), want locked until a day from now, nothing remaining", st, err)
	}
	req, _ := http.NewRequest("DELETE", srv.URL+"/policies/login-ip/keys/192.0.2.1", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("reset: %v %v", resp, err)
	}
	resp.Body.Close()
	if st := peek(); st.Locked || st.LockedUntil != "" || !st.Allowed {
		t.Errorf("peek after reset = %+v, want not locked", st)
	}
}

// TestCalendarJSON: calendar rules show their period and time zone, and a
// peek the period's usage and end.
func TestCalendarJSON(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	l := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "api", Rules: []core.Rule{
		{Limit: 10, Window: time.Second},
		{Limit: 1_000_000, Calendar: core.Month, Location: paris},
		{Limit: 50_000, Calendar: core.Day},
	}})
	if _, err := l.AllowN(context.Background(), "app", 3); err != nil {
		t.Fatal(err)
	}
	f := &fixture{srv: httptest.NewServer(opshttp.Handler([]*core.Limiter{l}, anyone))}
	t.Cleanup(f.srv.Close)
	_, body := f.do(t, "GET", "/policies/api")
	want := `{"name":"api","algorithm":"SlidingLog","rules":[{"limit":10,"window":"1s","window_seconds":1},` +
		`{"limit":1000000,"window":"0s","window_seconds":0,"calendar":"month","location":"Europe/Paris"},` +
		`{"limit":50000,"window":"0s","window_seconds":0,"calendar":"day","location":"UTC"}]}`
	if canon(t, body) != canon(t, want) {
		t.Errorf("GET /policies/api:\n got %s\nwant %s", body, want)
	}
	_, body = f.do(t, "GET", "/policies/api/keys/app")
	var st opshttp.KeyState
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	if r := st.Rules[1]; r.Calendar != "month" || r.Used != 3 || r.ResetAfterSeconds <= 0 || r.ResetAfterSeconds > 31*86400 {
		t.Errorf("peek: rules[1] = %+v, want the month's usage (3) and its end", r)
	}
	if r := st.Rules[2]; r.Calendar != "day" || r.Window != "24h0m0s" || r.Used != 3 {
		t.Errorf("peek: rules[2] = %+v, want the day's usage (3), Window 24h", r)
	}
}
