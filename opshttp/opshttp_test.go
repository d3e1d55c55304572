package opshttp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/opshttp"
)

// errSecret is the error of a store that is down, whose text must not
// reach the client.
var errSecret = errors.New("dial redis://:hunter2@10.0.0.1:6379: refused")

type fixture struct {
	srv    *httptest.Server
	login  *core.Limiter
	quota  *core.Limiter
	broken *core.Limiter
	logs   *bytes.Buffer
}

func setup(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{logs: &bytes.Buffer{}}
	f.login = testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "login", Rules: []core.Rule{{Limit: 5, Window: 15 * time.Minute}, {Limit: 20, Window: 24 * time.Hour}}})
	f.quota = testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "quota", Rules: []core.Rule{{Limit: 100000, Window: 24 * time.Hour}}, Algorithm: core.SlidingBuckets})
	f.broken = testkit.Limiter(t, testkit.FailingStore{Err: errSecret}, core.Policy{Name: "broken", Rules: []core.Rule{{Limit: 1, Window: time.Second}}})
	h := opshttp.Handler([]*core.Limiter{f.login, f.quota, f.broken}, anyone, opshttp.WithLogger(slog.New(slog.NewTextHandler(f.logs, nil))))
	f.srv = httptest.NewServer(http.StripPrefix("/admin", h))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fixture) do(t *testing.T, method, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, f.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

func TestRoutes(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	const key = "user/1@example.com" // a '/' travels as %2F
	for range 3 {
		if _, err := f.login.Allow(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name       string
		method     string
		path       string
		wantStatus int
		wantBody   string // JSON compared after re-encoding; "" for none
	}{
		{"list", "GET", "/admin/policies", 200,
			`[{"name":"login","algorithm":"SlidingLog","rules":[{"limit":5,"window":"15m0s","window_seconds":900},{"limit":20,"window":"24h0m0s","window_seconds":86400}]},` +
				`{"name":"quota","algorithm":"SlidingBuckets","buckets":60,"rules":[{"limit":100000,"window":"24h0m0s","window_seconds":86400}]},` +
				`{"name":"broken","algorithm":"SlidingLog","rules":[{"limit":1,"window":"1s","window_seconds":1}]}]`},
		{"one policy", "GET", "/admin/policies/quota", 200,
			`{"name":"quota","algorithm":"SlidingBuckets","buckets":60,"rules":[{"limit":100000,"window":"24h0m0s","window_seconds":86400}]}`},
		{"unknown policy", "GET", "/admin/policies/nope", 404, `{"error":"unknown policy"}`},
		{"peek unknown policy", "GET", "/admin/policies/nope/keys/x", 404, `{"error":"unknown policy"}`},
		{"reset unknown policy", "DELETE", "/admin/policies/nope/keys/x", 404, `{"error":"unknown policy"}`},
		{"peek untouched key", "GET", "/admin/policies/login/keys/someone-else", 200,
			`{"policy":"login","allowed":true,"limit":5,"window":"15m0s","remaining":5,"retry_after_seconds":0,"reset_after_seconds":0,"source":"store",` +
				`"rules":[{"limit":5,"window":"15m0s","used":0,"remaining":5,"retry_after_seconds":0,"reset_after_seconds":0},{"limit":20,"window":"24h0m0s","used":0,"remaining":20,"retry_after_seconds":0,"reset_after_seconds":0}]}`},
		{"wrong method", "POST", "/admin/policies", 405, ""},
		{"store failure is a fixed 503", "DELETE", "/admin/policies/broken/keys/x", 503, `{"error":"store unavailable"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, body := f.do(t, tc.method, tc.path)
			if status != tc.wantStatus {
				t.Fatalf("%s %s: status %d, want %d; body %s", tc.method, tc.path, status, tc.wantStatus, body)
			}
			if tc.wantBody != "" && canon(t, body) != canon(t, tc.wantBody) {
				t.Errorf("%s %s:\n got %s\nwant %s", tc.method, tc.path, body, tc.wantBody)
			}
			if strings.Contains(body, "hunter2") {
				t.Errorf("%s %s: body leaks the store error: %s", tc.method, tc.path, body)
			}
		})
	}
	if !strings.Contains(f.logs.String(), "reset failed") || strings.Contains(f.logs.String(), "key=") {
		t.Errorf("log = %q, want the reset failure, without the key", f.logs.String())
	}
}

// TestPeekAndReset is the support flow: look at a locked-out user, unlock.
func TestPeekAndReset(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	const key = "user/1@example.com"
	path := "/admin/policies/login/keys/user%2F1%40example.com"
	for range 5 {
		if _, err := f.login.Allow(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	if d, _ := f.login.Allow(ctx, key); d.Allowed {
		t.Fatal("sixth request admitted; want the user locked out")
	}
	for i := range 2 { // peeking twice consumes nothing
		status, body := f.do(t, "GET", path)
		var st opshttp.KeyState
		if err := json.Unmarshal([]byte(body), &st); err != nil || status != 200 {
			t.Fatalf("peek %d: status %d, body %s, %v", i, status, body, err)
		}
		if st.Allowed || st.Remaining != 0 || st.RetryAfterSeconds <= 0 || st.Rules[0].Used != 5 || st.Source != "store" {
			t.Errorf("peek %d of a locked-out key = %+v, want denied, 0 remaining, 5 used, a retry time", i, st)
		}
		if strings.Contains(body, "example.com") {
			t.Errorf("peek echoes the key: %s", body)
		}
	}
	if status, body := f.do(t, "DELETE", path); status != http.StatusNoContent || body != "" {
		t.Fatalf("reset: status %d body %q, want 204 and no body", status, body)
	}
	status, body := f.do(t, "GET", path)
	var st opshttp.KeyState
	if err := json.Unmarshal([]byte(body), &st); err != nil || status != 200 {
		t.Fatalf("peek after reset: status %d, body %s, %v", status, body, err)
	}
	if !st.Allowed || st.Remaining != 5 {
		t.Errorf("peek after reset = %+v, want allowed with 5 remaining", st)
	}
	if d, err := f.login.Allow(ctx, key); err != nil || !d.Allowed {
		t.Errorf("Allow after reset = %+v, %v; want admitted (store and deny cache cleared)", d, err)
	}
}

// Handler refuses to start open: without WithAuthorization, it panics as
// it does on the other programmer errors, naming the mistake.
func TestHandlerPanics(t *testing.T) {
	l := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "p", Rules: []core.Rule{{Limit: 1, Window: time.Second}}})
	tests := []struct {
		name     string
		limiters []*core.Limiter
		opts     []opshttp.Option
		want     string
	}{
		{"no authorization", []*core.Limiter{l}, nil,
			"ratekit: opshttp: Handler: no WithAuthorization option: the handler resets limits, so it must sit behind the app's admin check"},
		{"nil authorization", []*core.Limiter{l}, []opshttp.Option{opshttp.WithAuthorization(nil)}, "no WithAuthorization option"},
		{"authorization returning nil", []*core.Limiter{l}, []opshttp.Option{opshttp.WithAuthorization(func(http.Handler) http.Handler { return nil })},
			"ratekit: opshttp: Handler: WithAuthorization returned a nil handler"},
		{"nil limiter", []*core.Limiter{nil}, []opshttp.Option{anyone}, "nil *core.Limiter"},
		{"duplicate policy", []*core.Limiter{l, l}, []opshttp.Option{anyone}, "two limiters for policy p"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if p := recover(); p == nil || !strings.Contains(fmt.Sprint(p), tc.want) {
					t.Errorf("Handler(%s) panic %v, want one containing %q", tc.name, p, tc.want)
				}
			}()
			opshttp.Handler(tc.limiters, tc.opts...)
		})
	}
}

// canon re-encodes JSON so that formatting does not matter.
func canon(t *testing.T, s string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("invalid JSON %q: %v", s, err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// operatorKey is where the tests' authorization puts who is signed in.
type operatorKey struct{}

// testAuth admits requests with "Authorization: Bearer s3cret" and an
// X-Operator name, and puts the name in the request's context; it answers
// others 401 itself.
func testAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op := r.Header.Get("X-Operator")
		if r.Header.Get("Authorization") != "Bearer s3cret" || op == "" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), operatorKey{}, op)))
	})
}

// recorded is an observer that keeps the events it sees, with the
// operator of their request.
type recorded struct {
	mu     sync.Mutex
	events []core.Event
	ops    []string
}

func (o *recorded) Observe(ctx context.Context, e core.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	op, _ := ctx.Value(operatorKey{}).(string)
	o.events = append(o.events, e)
	o.ops = append(o.ops, op)
}

func (o *recorded) take() ([]core.Event, []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	e, ops := o.events, o.ops
	o.events, o.ops = nil, nil
	return e, ops
}

// TestHandlerReportsResets: every reset through the handler, done or
// failed, reaches the observers with the request's context; peeks do not.
func TestHandlerReportsResets(t *testing.T) {
	l := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "login", Rules: []core.Rule{{Limit: 1, Window: time.Hour}}})
	broken := testkit.Limiter(t, testkit.FailingStore{Err: errSecret}, core.Policy{Name: "broken", Rules: []core.Rule{{Limit: 1, Window: time.Second}}})
	obs := &recorded{}
	srv := mounted(t, opshttp.Handler([]*core.Limiter{l, broken}, opshttp.WithObserver(obs), opshttp.WithObserver(nil),
		opshttp.WithAuthorization(testAuth)))
	do := func(method, path string, auth bool) int {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if auth {
			req.Header.Set("Authorization", "Bearer s3cret")
			req.Header.Set("X-Operator", "dave")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if _, err := l.Allow(context.Background(), "alice"); err != nil {
		t.Fatal(err)
	}
	if got := do("DELETE", "/admin/ratelimit/policies/login/keys/alice", false); got != http.StatusUnauthorized {
		t.Errorf("DELETE without authorization = %d; want 401", got)
	}
	if d, _ := l.Peek(context.Background(), "alice"); d.Allowed {
		t.Error("a refused DELETE reset the key")
	}
	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{"GET", "/admin/ratelimit/policies/login/keys/alice", 200},
		{"DELETE", "/admin/ratelimit/policies/login/keys/alice", 204},
		{"DELETE", "/admin/ratelimit/policies/broken/keys/bob", 503},
	} {
		if got := do(tc.method, tc.path, true); got != tc.want {
			t.Errorf("%s %s = %d; want %d", tc.method, tc.path, got, tc.want)
		}
	}
	ev, ops := obs.take()
	if len(ev) != 2 ||
		ev[0].Kind != opshttp.EventReset || ev[0].Policy != "login" || ev[0].Key != "alice" || ev[0].Err != nil || ops[0] != "dave" ||
		ev[1].Kind != opshttp.EventReset || ev[1].Policy != "broken" || ev[1].Key != "bob" || !errors.Is(ev[1].Err, errSecret) || ops[1] != "dave" {
		t.Errorf("observers saw %+v by %q; want the reset of alice, then the failed one of bob, both by dave", ev, ops)
	}
}

// TestRefusedRoute: the refused route answers each policy's most refused
// keys from its limiter, n of them (10 by default), or from the source
// of WithTopRefused; a bad n is a 400 and a failing source a fixed 503.
func TestRefusedRoute(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	for key, n := range map[string]int{"203.0.113.5": 8, "203.0.113.6": 6, "203.0.113.7": 2} {
		for range n {
			if _, err := f.login.Allow(ctx, key); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		path       string
		wantStatus int
		wantBody   string
	}{
		{"/admin/policies/login/refused", 200,
			`{"policy":"login","keys":[{"key":"203.0.113.5","refusals":3},{"key":"203.0.113.6","refusals":1}]}`},
		{"/admin/policies/login/refused?n=1", 200, `{"policy":"login","keys":[{"key":"203.0.113.5","refusals":3}]}`},
		{"/admin/policies/quota/refused", 200, `{"policy":"quota","keys":[]}`},
		{"/admin/policies/broken/refused", 200, `{"policy":"broken","keys":[]}`},
		{"/admin/policies/nope/refused", 404, `{"error":"unknown policy"}`},
		{"/admin/policies/login/refused?n=0", 400, `{"error":"n must be one number within 1..100"}`},
		{"/admin/policies/login/refused?n=101", 400, `{"error":"n must be one number within 1..100"}`},
		{"/admin/policies/login/refused?n=x", 400, `{"error":"n must be one number within 1..100"}`},
		{"/admin/policies/login/refused?n=1&n=2", 400, `{"error":"n must be one number within 1..100"}`},
	} {
		status, body := f.do(t, "GET", tc.path)
		if status != tc.wantStatus || canon(t, body) != canon(t, tc.wantBody) {
			t.Errorf("GET %s = %d %s, want %d %s", tc.path, status, body, tc.wantStatus, tc.wantBody)
		}
	}
	if status, _ := f.do(t, "DELETE", "/admin/policies/login/refused"); status != 405 {
		t.Errorf("DELETE of the refused route = %d, want 405", status)
	}

	failing := opshttp.Handler([]*core.Limiter{f.login}, anyone, opshttp.WithTopRefused(func(context.Context, string, int) ([]opshttp.RefusedKey, error) {
		return nil, errSecret
	}))
	srv := mounted(t, failing)
	a := send(t, srv, "GET", "/admin/ratelimit/policies/login/refused")
	if a.status != 503 || canon(t, a.body) != canon(t, `{"error":"store unavailable"}`) {
		t.Errorf("a failing source: %d %s, want 503 and a fixed text", a.status, a.body)
	}
}
