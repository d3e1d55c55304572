package adaptertest

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/keyfunc/personal"
)

// NewServer starts a server for one case: limiter l behind the adapter's
// middleware configured by opts, the suite's handler on [Path]. It
// returns the base URL ("http://127.0.0.1:port") and stops the server in
// t.Cleanup.
type NewServer func(t *testing.T, l *core.Limiter, opts Options) (baseURL string)

// Fixed texts every adapter answers with (from guard.Verdict.Body).
const (
	badKeyBody      = "bad request: missing or malformed rate-limit key\n"
	badPhoneBody    = "bad request: invalid phone number\n"
	unavailableBody = "service unavailable: rate limiter unavailable\n"
	tooLargeBody    = "content too large: request body too large\n"
	textPlain       = "text/plain; charset=utf-8"
)

// hour is the window of most cases: long enough that nothing leaves it
// during a test, so Retry-After and X-RateLimit-Reset are exactly 3600.
const hour = time.Hour

// Run runs the conformance suite against the adapter that newServer
// serves.
func Run(t *testing.T, newServer NewServer) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, newServer)
		})
	}
}

type testCase struct {
	name string
	run  func(t *testing.T, newServer NewServer)
}

// request describes one request to the server.
type request struct {
	method string // GET by default
	query  string // appended to Path after "?"
	header http.Header
	body   string
}

type response struct {
	status int
	header http.Header
	body   string
}

func (r response) String() string {
	return strconv.Itoa(r.status) + " " + strconv.Quote(r.body)
}

func do(t *testing.T, base server, rq request) response {
	t.Helper()
	res, err := try(base, rq)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// try sends rq and returns the response, or the error of a request that
// got none (an aborted response).
func try(base server, rq request) (response, error) {
	method := rq.method
	if method == "" {
		method = http.MethodGet
	}
	url := base.url + Path
	if rq.query != "" {
		url += "?" + rq.query
	}
	var body io.Reader
	if rq.body != "" {
		body = strings.NewReader(rq.body)
	}
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		return response{}, err
	}
	for k, vs := range rq.header {
		req.Header[k] = vs
	}
	if rq.body != "" && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := base.client.Do(req)
	if err != nil {
		return response{}, fmt.Errorf("%s %s: %w", method, url, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return response{}, fmt.Errorf("%s %s: reading body: %w", method, url, err)
	}
	return response{status: res.StatusCode, header: res.Header, body: string(b)}, nil
}

// server is a started server and the client that talks to it.
type server struct {
	url    string
	client *http.Client
}

// start starts a server for one case with its own client, which does not
// follow redirects (the suite checks the status answered) and whose idle
// connections are closed before the server stops, so that servers that
// wait for open connections on shutdown (fasthttp) stop at once.
func start(t *testing.T, newServer NewServer, l *core.Limiter, opts Options) server {
	t.Helper()
	url := newServer(t, l, opts)
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections) // runs before newServer's cleanups
	return server{url: url, client: &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       30 * time.Second,
	}}
}

func get(t *testing.T, base server) response {
	t.Helper()
	return do(t, base, request{})
}

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// wantStatus checks the status of the i-th response.
func wantStatus(t *testing.T, what string, res response, want int) {
	t.Helper()
	if res.status != want {
		t.Fatalf("%s: got %v, want status %d", what, res, want)
	}
}

// wantHeaders checks header fields; "" means absent.
func wantHeaders(t *testing.T, what string, res response, kv ...string) {
	t.Helper()
	for i := 0; i+1 < len(kv); i += 2 {
		got, ok := res.header[http.CanonicalHeaderKey(kv[i])]
		switch {
		case kv[i+1] == "" && ok:
			t.Errorf("%s: header %s = %q, want absent", what, kv[i], got)
		case kv[i+1] != "" && (len(got) != 1 || got[0] != kv[i+1]):
			t.Errorf("%s: header %s = %q, want %q", what, kv[i], got, kv[i+1])
		}
	}
}

func statuses(t *testing.T, base server, rq request, n int) []int {
	t.Helper()
	s := make([]int, n)
	for i := range s {
		s[i] = do(t, base, rq).status
	}
	return s
}

func wantStatuses(t *testing.T, what string, got []int, want ...int) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: statuses %v, want %v", what, got, want)
	}
}

// Key functions the cases use.
var (
	userKey    = keyfunc.Header("X-User")
	phoneKey   = personal.Phone(personal.Header("X-Phone"), personal.DefaultRegion("CN"))
	phoneJSON  = personal.Phone(personal.JSON("phone"), personal.DefaultRegion("CN"))
	trustedKey = keyfunc.ClientIP(keyfunc.TrustedProxies("127.0.0.0/8"))
	tenantKey  = keyfunc.Header("X-Tenant")
)

// wantUsed checks, with Peek, the units recorded for key on l.
func wantUsed(t *testing.T, l *core.Limiter, key string, want int64) {
	t.Helper()
	d, err := l.Peek(context.Background(), key)
	if err != nil {
		t.Fatalf("Peek(%q): %v", key, err)
	}
	if len(d.Rules()) != 1 || d.Rules()[0].Used != want {
		t.Errorf("policy %s: Peek(%q) = %+v, want %d units used", l.Policy().Name, key, d, want)
	}
}

// checkStatusProblem checks a refusal other than a denial: status, and an
// RFC 9457 body of type about:blank with that status, the title and a
// fixed detail ("" means any, but present), never an error's text.
func checkStatusProblem(t *testing.T, what string, res response, status int, title, detail string) {
	t.Helper()
	if res.status != status {
		t.Errorf("%s: got %v, want status %d", what, res, status)
	}
	wantHeaders(t, what, res, "Content-Type", "application/problem+json", "X-Content-Type-Options", "nosniff")
	var p map[string]any
	if err := json.Unmarshal([]byte(res.body), &p); err != nil {
		t.Fatalf("%s: body %q is not JSON: %v", what, res.body, err)
	}
	if p["type"] != "about:blank" || p["title"] != title || p["status"] != float64(status) ||
		(detail != "" && p["detail"] != detail) || p["detail"] == nil || len(p) != 4 {
		t.Errorf("%s: problem %v, want type about:blank, title %q, status %d, detail %q", what, p, title, status, detail)
	}
	if strings.Contains(res.body, "keyfunc") || strings.Contains(res.body, "ratekit") || strings.Contains(res.body, errDown.Error()) {
		t.Errorf("%s: body %q leaks an error", what, res.body)
	}
}

// gzipped returns a gzip stream of n members, each compressing text.
func gzipped(t *testing.T, n int, text string) []byte {
	t.Helper()
	var member bytes.Buffer
	zw, err := gzip.NewWriterLevel(&member, gzip.BestCompression)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(zw, text); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return bytes.Repeat(member.Bytes(), n)
}

// checkProblem checks an RFC 9457 denial body naming policy.
func checkProblem(t *testing.T, what string, res response, policy string) {
	t.Helper()
	if ct := res.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("%s: Content-Type %q, want application/problem+json", what, ct)
	}
	var p struct {
		Status           int      `json:"status"`
		ViolatedPolicies []string `json:"violated-policies"`
	}
	if err := json.Unmarshal([]byte(res.body), &p); err != nil {
		t.Fatalf("%s: body %q is not JSON: %v", what, res.body, err)
	}
	if p.Status != http.StatusTooManyRequests || !reflect.DeepEqual(p.ViolatedPolicies, []string{policy}) {
		t.Errorf("%s: problem %+v, want status 429, violated-policies [%s]", what, p, policy)
	}
}

// checkChallenge checks the default answer to a challenged request:
// 429, an RFC 9457 body of the challenge's type naming policy, and no
// Retry-After.
func checkChallenge(t *testing.T, what string, res response, policy string) {
	t.Helper()
	wantStatus(t, what, res, http.StatusTooManyRequests)
	wantHeaders(t, what, res, "Content-Type", "application/problem+json", guard.HeaderRetryAfter, "")
	var p struct {
		Type               string   `json:"type"`
		Status             int      `json:"status"`
		ChallengedPolicies []string `json:"challenged-policies"`
	}
	if err := json.Unmarshal([]byte(res.body), &p); err != nil {
		t.Fatalf("%s: body %q is not JSON: %v", what, res.body, err)
	}
	if p.Type != guard.ChallengeProblemType || p.Status != http.StatusTooManyRequests || !reflect.DeepEqual(p.ChallengedPolicies, []string{policy}) {
		t.Errorf("%s: problem %+v, want type %s, status 429, challenged-policies [%s]", what, p, guard.ChallengeProblemType, policy)
	}
}

var cases = []testCase{
	{"allow then deny with headers", func(t *testing.T, newServer NewServer) {
		base := start(t, newServer, testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("basic", testkit.PerHour(3))), Options{})
		for i, remaining := range []string{"2", "1", "0"} {
			res := get(t, base)
			what := "request " + strconv.Itoa(i+1)
			wantStatus(t, what, res, http.StatusOK)
			if res.body != "ok len=0\n" {
				t.Errorf("%s: body %q, want the handler's", what, res.body)
			}
			wantHeaders(t, what, res,
				guard.HeaderLimit, "3", guard.HeaderRemaining, remaining, guard.HeaderReset, "3600",
				guard.HeaderRetryAfter, "", guard.HeaderPolicy, "", guard.HeaderRateLimit, "")
		}
		for i := range 2 {
			res := get(t, base)
			what := "denied request " + strconv.Itoa(i+1)
			wantStatus(t, what, res, http.StatusTooManyRequests)
			if want := "rate limit exceeded: retry after 3600s\n"; res.body != want {
				t.Errorf("%s: body %q, want %q", what, res.body, want)
			}
			wantHeaders(t, what, res,
				guard.HeaderLimit, "3", guard.HeaderRemaining, "0", guard.HeaderReset, "3600",
				guard.HeaderRetryAfter, "3600",
				"Content-Type", textPlain, "X-Content-Type-Options", "nosniff")
		}
	}},

	{"route key: one bucket whatever the method", func(t *testing.T, newServer NewServer) {
		// A route registered for every method is one route: a client
		// choosing methods, standard or made up, gets no extra buckets.
		l := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("route", testkit.PerHour(3)))
		base := start(t, newServer, l, Options{Key: keyfunc.Join(keyfunc.ClientIP(), keyfunc.Route()), AnyMethod: true})
		admitted := 0
		var got []string
		for _, m := range []string{"GET", "POST", "PUT", "DELETE", "PATCH", "A1", "A2", "A3", "A19", "get"} {
			res := do(t, base, request{method: m})
			got = append(got, m+"="+strconv.Itoa(res.status))
			switch res.status {
			case http.StatusOK:
				admitted++
			case http.StatusTooManyRequests, http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusNotImplemented, http.StatusBadRequest:
				// Refused by the limit, or by the framework's router
				// before the limiter for a method it does not route.
			default:
				t.Errorf("method %s: got %v", m, res)
			}
		}
		if admitted != 3 {
			t.Errorf("limit 3 per route and client: %d requests admitted across methods, want 3: %v", admitted, got)
		}
		if !slices.Contains(got, "PUT=429") && !slices.Contains(got, "DELETE=429") && !slices.Contains(got, "PATCH=429") {
			t.Errorf("no standard method was refused by the limit: %v", got)
		}
	}},

	{"personal keys: sources that disagree are a 400", func(t *testing.T, newServer NewServer) {
		// The handler may read the query, the form or either value of a
		// repeated parameter: the request is refused, never keyed by one.
		phone := personal.Phone(personal.DefaultRegion("CN"))
		base := start(t, newServer, testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("phone-conflict", testkit.PerHour(5))), Options{Key: phone})
		const conflict = "bad request: conflicting phone numbers in request\n"
		form := hdr("Content-Type", "application/x-www-form-urlencoded")
		for _, tc := range []struct {
			name string
			rq   request
		}{
			{"query and form", request{method: http.MethodPost, query: "phone=13800138000", header: form, body: "phone=%2B12025550143"}},
			{"query repeated", request{query: "phone=13800138000&phone=%2B12025550143"}},
			{"query in two cases", request{query: "phone=13800138000&PHONE=%2B12025550143"}},
			{"form repeated", request{method: http.MethodPost, header: form, body: "phone=13800138000&phone=%2B12025550143"}},
		} {
			res := do(t, base, tc.rq)
			wantStatus(t, tc.name, res, http.StatusBadRequest)
			if res.body != conflict {
				t.Errorf("%s: body %q, want %q", tc.name, res.body, conflict)
			}
		}
		wantStatus(t, "one number twice", do(t, base, request{query: "phone=13800138000&phone=8613800138000"}), http.StatusOK)
	}},

	{"skip predicate", func(t *testing.T, newServer NewServer) {
		skip := func(r keyfunc.Request) bool { return r.Header("X-Skip") == "1" }
		base := start(t, newServer, testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("skip", testkit.PerHour(1))), Options{Skip: skip})
		for range 3 {
			res := do(t, base, request{header: hdr("X-Skip", "1")})
			wantStatus(t, "skipped", res, http.StatusOK)
			wantHeaders(t, "skipped", res, guard.HeaderLimit, "", guard.HeaderRemaining, "")
		}
		wantStatuses(t, "not skipped", statuses(t, base, request{}, 2), 200, 429)
		wantStatus(t, "skipped after denial", do(t, base, request{header: hdr("X-Skip", "1")}), http.StatusOK)
	}},

	{"allow and block lists of networks", func(t *testing.T, newServer NewServer) {
		proxy := keyfunc.TrustedProxies("127.0.0.1")
		nets := func(cidrs ...string) []netip.Prefix {
			ps, err := keyfunc.ParseTrustedProxies(cidrs...)
			if err != nil {
				t.Fatal(err)
			}
			return ps
		}
		obs := &testkit.Events{}
		base := start(t, newServer, testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("lists", testkit.PerHour(1))), Options{
			Key:      keyfunc.ClientIP(proxy),
			Skip:     keyfunc.InNetworks(nets("10.0.0.0/8"), proxy),
			Block:    keyfunc.InNetworks(nets("203.0.113.0/24", "2001:db8::/32"), proxy),
			Observer: obs,
		})
		from := func(addr string) request { return request{header: hdr("X-Forwarded-For", addr)} }
		for _, addr := range []string{"203.0.113.7", "2001:db8::1"} {
			res := do(t, base, from(addr))
			wantStatus(t, "blocked "+addr, res, http.StatusForbidden)
			if want := "forbidden: blocked\n"; res.body != want {
				t.Errorf("blocked %s: body %q, want %q", addr, res.body, want)
			}
			wantHeaders(t, "blocked "+addr, res, guard.HeaderLimit, "", guard.HeaderRetryAfter, "")
		}
		// A spoofed header from a client the proxy passed on is the
		// proxy's last hop, not the client: 10.0.0.1 is not allowed by
		// a header the client wrote before the proxy's own.
		wantStatuses(t, "allowed network", statuses(t, base, from("10.1.2.3"), 3), 200, 200, 200)
		wantStatuses(t, "other client", statuses(t, base, from("198.51.100.1"), 2), 200, 429)
		wantStatuses(t, "spoofed allow behind the client", statuses(t, base, from("10.1.2.3, 198.51.100.1"), 1), 429)
		blocks := 0
		for _, e := range obs.All() {
			if e.Kind == guard.EventBlock {
				blocks++
			}
		}
		if blocks != 2 {
			t.Errorf("observer saw %d blocks, want 2", blocks)
		}
	}},

	{"custom deny handler", func(t *testing.T, newServer NewServer) {
		base := start(t, newServer, testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("deny", testkit.PerHour(1))), Options{DenyHandler: true})
		wantStatus(t, "first", get(t, base), http.StatusOK)
		res := get(t, base)
		wantStatus(t, "denied", res, http.StatusTooManyRequests)
		if want := "custom deny: retry in 3600s\n"; res.body != want {
			t.Errorf("denied: body %q, want the deny handler's %q", res.body, want)
		}
		wantHeaders(t, "denied", res, guard.HeaderRetryAfter, "3600", guard.HeaderLimit, "1", guard.HeaderRemaining, "0")
	}},

	{"challenge before the limit: default answer, pass, then the limit", func(t *testing.T, newServer NewServer) {
		// Limit 4 and Challenge 2: the 2nd request is challenged (429,
		// the challenge's problem type whatever the body style, no
		// Retry-After, the handler not reached, nothing counted) until
		// the key passes; then requests 2 to 4 go on and the 5th is
		// denied as usual.
		l := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "login-challenge", Rules: []core.Rule{{Limit: 4, Window: hour, Challenge: 2}}})
		base := start(t, newServer, l, Options{Key: userKey})
		alice := request{header: hdr("X-User", "alice")}
		wantStatus(t, "request 1", do(t, base, alice), http.StatusOK)
		for i := range 3 {
			what := "challenged request " + strconv.Itoa(i+1)
			res := do(t, base, alice)
			checkChallenge(t, what, res, "login-challenge")
			wantHeaders(t, what, res, guard.HeaderRetryAfter, "", guard.HeaderLimit, "4", guard.HeaderRemaining, "3",
				"X-Content-Type-Options", "nosniff")
		}
		wantUsed(t, l, "alice", 1)
		if err := l.Pass(context.Background(), "alice"); err != nil {
			t.Fatal(err)
		}
		for i, remaining := range []string{"2", "1", "0"} {
			res := do(t, base, alice)
			what := "request " + strconv.Itoa(i+2) + " after the pass"
			wantStatus(t, what, res, http.StatusOK)
			wantHeaders(t, what, res, guard.HeaderRemaining, remaining)
		}
		res := do(t, base, alice)
		wantStatus(t, "request 5", res, http.StatusTooManyRequests)
		wantHeaders(t, "request 5", res, guard.HeaderRetryAfter, "3600", "Content-Type", textPlain)
		// Another key has no pass.
		bob := request{header: hdr("X-User", "bob")}
		wantStatus(t, "bob 1", do(t, base, bob), http.StatusOK)
		checkChallenge(t, "bob 2", do(t, base, bob), "login-challenge")
	}},

	{"custom challenge handler", func(t *testing.T, newServer NewServer) {
		l := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "login-2fa", Rules: []core.Rule{{Limit: 2, Window: hour, Challenge: 1}}})
		body := guard.BodyProblem
		base := start(t, newServer, l, Options{Key: userKey, Body: &body, ChallengeHandler: true, DenyHandler: true})
		alice := request{header: hdr("X-User", "alice")}
		res := do(t, base, alice)
		wantStatus(t, "challenged", res, http.StatusUnauthorized)
		if want := "custom challenge: login-2fa\n"; res.body != want {
			t.Errorf("challenged: body %q, want the challenge handler's %q", res.body, want)
		}
		wantHeaders(t, "challenged", res, guard.HeaderRetryAfter, "", guard.HeaderLimit, "2", guard.HeaderRemaining, "2")
		wantUsed(t, l, "alice", 0)
		if err := l.Pass(context.Background(), "alice"); err != nil {
			t.Fatal(err)
		}
		wantStatuses(t, "after the pass", statuses(t, base, alice, 2), 200, 200)
		res = do(t, base, alice)
		wantStatus(t, "denied", res, http.StatusTooManyRequests)
		if want := "custom deny: retry in 3600s\n"; res.body != want {
			t.Errorf("denied: body %q, want the deny handler's %q", res.body, want)
		}
	}},

	{"missing key skips by default", func(t *testing.T, newServer NewServer) {
		obs := &testkit.Events{}
		base := start(t, newServer, testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("nokey", testkit.PerHour(1))), Options{Key: userKey, Observer: obs})
		for range 3 {
			res := get(t, base)
			wantStatus(t, "anonymous", res, http.StatusOK)
			wantHeaders(t, "anonymous", res, guard.HeaderLimit, "")
		}
		alice := request{header: hdr("X-User", "alice")}
		wantStatuses(t, "alice", statuses(t, base, alice, 2), 200, 429)
		wantStatus(t, "bob", do(t, base, request{header: hdr("X-User", "bob")}), http.StatusOK)
		skips := 0
		for _, e := range obs.All() {
			if e.Kind == guard.EventSkip {
				skips++
			}
		}
		if skips != 3 {
			t.Errorf("observer saw %d skips, want 3", skips)
		}
	}},

	{"missing key rejected with NoKeyReject", func(t *testing.T, newServer NewServer) {
		base := start(t, newServer, testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("nokey-reject", testkit.PerHour(5))),
			Options{Key: userKey, NoKey: new(guard.NoKeyReject)})
		res := get(t, base)
		wantStatus(t, "anonymous", res, http.StatusBadRequest)
		if res.body != badKeyBody {
			t.Errorf("anonymous: body %q, want %q", res.body, badKeyBody)
		}
		wantHeaders(t, "anonymous", res, guard.HeaderLimit, "", guard.HeaderRetryAfter, "")
		wantStatus(t, "alice", do(t, base, request{header: hdr("X-User", "alice")}), http.StatusOK)
	}},

	{"bad key is a 400 with a fixed reason", func(t *testing.T, newServer NewServer) {
		obs := &testkit.Events{}
		base := start(t, newServer, testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("badkey", testkit.PerHour(5))), Options{Key: phoneKey, Observer: obs})
		const bad = "0000000"
		res := do(t, base, request{header: hdr("X-Phone", bad)})
		wantStatus(t, "bad phone", res, http.StatusBadRequest)
		if res.body != badPhoneBody {
			t.Errorf("bad phone: body %q, want %q", res.body, badPhoneBody)
		}
		wantHeaders(t, "bad phone", res, "Content-Type", textPlain, guard.HeaderLimit, "")
		var keyErr error
		for _, e := range obs.All() {
			if e.Kind == guard.EventKeyError {
				keyErr = e.Err
			}
		}
		if keyErr == nil {
			t.Fatal("observer saw no key error")
		}
		for _, leak := range []string{bad, keyErr.Error()} {
			if strings.Contains(res.body, leak) {
				t.Errorf("bad phone: body %q leaks %q", res.body, leak)
			}
			for name, vs := range res.header {
				if strings.Contains(strings.Join(vs, ","), leak) {
					t.Errorf("bad phone: header %s %q leaks %q", name, vs, leak)
				}
			}
		}
		wantStatus(t, "good phone", do(t, base, request{header: hdr("X-Phone", "13800138000")}), http.StatusOK)
	}},

	{"bad key skipped with KeyErrorSkip", func(t *testing.T, newServer NewServer) {
		base := start(t, newServer, testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("badkey-skip", testkit.PerHour(1))),
			Options{Key: phoneKey, KeyError: new(guard.KeyErrorSkip)})
		wantStatuses(t, "bad phone", statuses(t, base, request{header: hdr("X-Phone", "nope")}, 3), 200, 200, 200)
	}},

	{"cost weights", func(t *testing.T, newServer NewServer) {
		cost := func(r keyfunc.Request) int64 {
			n, _ := strconv.ParseInt(r.Query("cost"), 10, 64)
			return n
		}
		base := start(t, newServer, testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("cost", testkit.PerHour(10))), Options{Cost: cost})
		for _, want := range []string{"7", "4", "1"} {
			res := do(t, base, request{query: "cost=3"})
			wantStatus(t, "cost 3", res, http.StatusOK)
			wantHeaders(t, "cost 3", res, guard.HeaderLimit, "10", guard.HeaderRemaining, want)
		}
		res := do(t, base, request{query: "cost=3"})
		wantStatus(t, "cost 3 over", res, http.StatusTooManyRequests)
		wantHeaders(t, "cost 3 over", res, guard.HeaderRemaining, "1")
		res = do(t, base, request{query: "cost=0"})
		wantStatus(t, "cost 0 is malformed", res, http.StatusBadRequest)
		wantHeaders(t, "cost 0 is malformed", res, guard.HeaderLimit, "")
		if res.body != "bad request: invalid request cost\n" {
			t.Errorf("cost 0: body %q, want the fixed invalid-cost text", res.body)
		}
		res = do(t, base, request{query: "cost=11"})
		wantStatus(t, "cost 11 never fits", res, http.StatusTooManyRequests)
		wantHeaders(t, "cost 11 never fits", res, guard.HeaderRetryAfter, "", guard.HeaderLimit, "")
		res = do(t, base, request{query: "cost=1"})
		wantStatus(t, "cost 1", res, http.StatusOK)
		wantHeaders(t, "cost 1", res, guard.HeaderRemaining, "0")
	}},

	{"IETF headers", func(t *testing.T, newServer NewServer) {
		l := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("ietf", testkit.PerHour(2), core.Rule{Limit: 5, Window: 24 * hour}))
		base := start(t, newServer, l, Options{Headers: new(guard.HeadersIETF)})
		for i, remaining := range []int64{1, 0} {
			res := get(t, base)
			what := "request " + strconv.Itoa(i+1)
			wantStatus(t, what, res, http.StatusOK)
			wantHeaders(t, what, res, guard.HeaderLimit, "", guard.HeaderRemaining, "", guard.HeaderReset, "")
			checkIETF(t, what, res, []ietfItem{
				{name: "ietf-3600s", q: 2, w: 3600, r: remaining, t: 3600},
				{name: "ietf-86400s", q: 5, w: 86400, r: 4 - int64(i), t: 86400},
			})
		}
		res := get(t, base)
		wantStatus(t, "denied", res, http.StatusTooManyRequests)
		wantHeaders(t, "denied", res, guard.HeaderRetryAfter, "3600")
		checkIETF(t, "denied", res, []ietfItem{
			{name: "ietf-3600s", q: 2, w: 3600, r: 0, t: 3600},
			{name: "ietf-86400s", q: 5, w: 86400, r: 3, t: 86400},
		})
	}},

	{"both header styles", func(t *testing.T, newServer NewServer) {
		base := start(t, newServer, testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("both", testkit.PerHour(2))),
			Options{Headers: new(guard.HeadersXRateLimit | guard.HeadersIETF)})
		res := get(t, base)
		wantHeaders(t, "first", res, guard.HeaderLimit, "2", guard.HeaderRemaining, "1")
		checkIETF(t, "first", res, []ietfItem{{name: "both", q: 2, w: 3600, r: 1, t: 3600}})
	}},

	{"no headers", func(t *testing.T, newServer NewServer) {
		base := start(t, newServer, testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("none", testkit.PerHour(1))), Options{Headers: new(guard.HeadersNone)})
		res := get(t, base)
		wantHeaders(t, "allowed", res, guard.HeaderLimit, "", guard.HeaderPolicy, "", guard.HeaderRateLimit, "")
		res = get(t, base)
		wantStatus(t, "denied", res, http.StatusTooManyRequests)
		wantHeaders(t, "denied", res, guard.HeaderLimit, "", guard.HeaderRetryAfter, "3600")
	}},

	{"problem+json body", func(t *testing.T, newServer NewServer) {
		base := start(t, newServer, testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("problem", testkit.PerHour(1))), Options{Body: new(guard.BodyProblem)})
		wantStatus(t, "first", get(t, base), http.StatusOK)
		res := get(t, base)
		wantStatus(t, "denied", res, http.StatusTooManyRequests)
		wantHeaders(t, "denied", res, "Content-Type", "application/problem+json", guard.HeaderRetryAfter, "3600")
		var p struct {
			Type             string   `json:"type"`
			Title            string   `json:"title"`
			Status           int      `json:"status"`
			Detail           string   `json:"detail"`
			ViolatedPolicies []string `json:"violated-policies"`
			RetryAfter       int      `json:"retry-after"`
		}
		if err := json.Unmarshal([]byte(res.body), &p); err != nil {
			t.Fatalf("denied: body %q is not JSON: %v", res.body, err)
		}
		if p.Type != guard.ProblemType || p.Status != 429 || p.Title == "" ||
			!reflect.DeepEqual(p.ViolatedPolicies, []string{"problem"}) || p.RetryAfter != 3600 {
			t.Errorf("denied: problem %+v, want type %s, status 429, violated-policies [problem], retry-after 3600", p, guard.ProblemType)
		}
	}},

	{"dry run", func(t *testing.T, newServer NewServer) {
		obs := &testkit.Events{}
		base := start(t, newServer, testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("dry", testkit.PerHour(1))), Options{DryRun: true, Observer: obs})
		first := get(t, base)
		wantStatus(t, "first", first, http.StatusOK)
		wantHeaders(t, "first", first, guard.HeaderLimit, "1", guard.HeaderRemaining, "0")
		for range 3 {
			res := get(t, base)
			wantStatus(t, "over the limit", res, http.StatusOK)
			wantHeaders(t, "over the limit", res, guard.HeaderLimit, "", guard.HeaderRetryAfter, "")
			if res.body != "ok len=0\n" {
				t.Errorf("over the limit: body %q, want the handler's", res.body)
			}
		}
		dry := 0
		for _, e := range obs.All() {
			if e.Kind == guard.EventDryRun {
				dry++
				if e.Decision.Allowed || e.Policy != "dry" {
					t.Errorf("dry-run event %+v, want a denied decision of policy dry", e)
				}
			}
		}
		if dry != 3 {
			t.Errorf("observer saw %d dry-run denials, want 3", dry)
		}
	}},

	{"trusted proxy X-Forwarded-For", func(t *testing.T, newServer NewServer) {
		base := start(t, newServer, testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("xff", testkit.PerHour(1))), Options{Key: trustedKey})
		a := request{header: hdr("X-Forwarded-For", "203.0.113.1")}
		b := request{header: hdr("X-Forwarded-For", "198.51.100.9, 203.0.113.2")}
		wantStatus(t, "client a", do(t, base, a), http.StatusOK)
		wantStatus(t, "client b", do(t, base, b), http.StatusOK)
		wantStatus(t, "client a again", do(t, base, a), http.StatusTooManyRequests)
		wantStatus(t, "client b via another proxy", do(t, base, request{header: hdr("X-Forwarded-For", "203.0.113.2, 127.0.0.5")}), http.StatusTooManyRequests)
		wantStatus(t, "client b, spoofed left part", do(t, base, request{header: hdr("X-Forwarded-For", "203.0.113.99, 203.0.113.2")}), http.StatusTooManyRequests)
		wantStatus(t, "no header: the proxy itself", get(t, base), http.StatusOK)
	}},

	{"trusted proxy Forwarded", func(t *testing.T, newServer NewServer) {
		// ClientIP reads the one header named by ForwardingHeader.
		key := keyfunc.ClientIP(keyfunc.TrustedProxies("127.0.0.0/8"), keyfunc.ForwardingHeader("Forwarded"))
		base := start(t, newServer, testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("fwd", testkit.PerHour(1))), Options{Key: key})
		a := request{header: hdr("Forwarded", "for=203.0.113.1;proto=https")}
		b := request{header: hdr("Forwarded", `for="[2001:db8:1:2::7]:4711"`)}
		wantStatus(t, "client a", do(t, base, a), http.StatusOK)
		wantStatus(t, "client b", do(t, base, b), http.StatusOK)
		wantStatus(t, "client a again", do(t, base, a), http.StatusTooManyRequests)
		wantStatus(t, "client b's /64", do(t, base, request{header: hdr("Forwarded", `for="[2001:db8:1:2::8]"`)}), http.StatusTooManyRequests)
		wantStatus(t, "client c", do(t, base, request{header: hdr("Forwarded", "for=192.0.2.60, for=127.0.0.9")}), http.StatusOK)
	}},

	{"spoofed X-Forwarded-For ignored without trusted proxies", func(t *testing.T, newServer NewServer) {
		base := start(t, newServer, testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("spoof", testkit.PerHour(1))), Options{})
		wantStatus(t, "first", do(t, base, request{header: hdr("X-Forwarded-For", "203.0.113.1")}), http.StatusOK)
		wantStatus(t, "spoofed other client", do(t, base, request{header: hdr("X-Forwarded-For", "203.0.113.2")}), http.StatusTooManyRequests)
		wantStatus(t, "spoofed Forwarded", do(t, base, request{header: hdr("Forwarded", "for=203.0.113.3")}), http.StatusTooManyRequests)
		wantStatus(t, "spoofed X-Real-IP", do(t, base, request{header: hdr("X-Real-IP", "203.0.113.4")}), http.StatusTooManyRequests)
	}},

	{"IPv4-mapped IPv6 normalised", func(t *testing.T, newServer NewServer) {
		base := start(t, newServer, testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("mapped", testkit.PerHour(1))), Options{Key: trustedKey})
		wantStatus(t, "mapped", do(t, base, request{header: hdr("X-Forwarded-For", "::ffff:10.1.2.3")}), http.StatusOK)
		wantStatus(t, "plain", do(t, base, request{header: hdr("X-Forwarded-For", "10.1.2.3")}), http.StatusTooManyRequests)
	}},

	{"count only failures", func(t *testing.T, newServer NewServer) {
		for _, viaError := range []bool{false, true} {
			name := "written"
			if viaError {
				name = "returned error"
			}
			t.Run(name, func(t *testing.T) {
				failures := func(status int) bool { return status >= 400 }
				base := start(t, newServer, testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("login", testkit.PerHour(2))), Options{CountIf: failures})
				fail := request{query: "status=401"}
				if viaError {
					fail.query += "&return_error=1"
				}
				for range 4 {
					res := do(t, base, request{query: "status=200"})
					wantStatus(t, "success", res, http.StatusOK)
					wantHeaders(t, "success (reserved, then refunded)", res, guard.HeaderRemaining, "1")
				}
				res := do(t, base, fail)
				wantStatus(t, "failure 1", res, http.StatusUnauthorized)
				wantHeaders(t, "failure 1", res, guard.HeaderRemaining, "1")
				res = do(t, base, fail)
				wantStatus(t, "failure 2", res, http.StatusUnauthorized)
				wantHeaders(t, "failure 2", res, guard.HeaderRemaining, "0")
				wantStatus(t, "after two failures", do(t, base, request{query: "status=200"}), http.StatusTooManyRequests)
			})
		}
	}},

	{"count-if judges a returned error by its status", func(t *testing.T, newServer NewServer) {
		// A framework error with a 302 status is a success for count-if; a
		// plain error is a 500 and counts.
		failures := func(status int) bool { return status >= 400 }
		base := start(t, newServer, testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("redirect", testkit.PerHour(1))), Options{CountIf: failures})
		for range 3 {
			wantStatus(t, "redirect", do(t, base, request{query: "status=302&return_error=1"}), http.StatusFound)
		}
		wantStatus(t, "plain error", do(t, base, request{query: "return_error=plain"}), http.StatusInternalServerError)
		wantStatus(t, "after the failure", get(t, base), http.StatusTooManyRequests)
	}},

	{"reset on success", func(t *testing.T, newServer NewServer) {
		base := start(t, newServer, testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("reset", testkit.PerHour(3))), Options{
			CountIf: func(status int) bool { return status >= 400 },
			ResetIf: func(status int) bool { return status == http.StatusOK },
		})
		fail := request{query: "status=401&return_error=1"}
		wantStatuses(t, "failures", statuses(t, base, fail, 2), 401, 401)
		res := get(t, base)
		wantStatus(t, "success", res, http.StatusOK)
		wantHeaders(t, "success", res, guard.HeaderRemaining, "0")
		res = do(t, base, fail)
		wantStatus(t, "failure after reset", res, http.StatusUnauthorized)
		wantHeaders(t, "failure after reset", res, guard.HeaderRemaining, "2")
	}},

	{"body readable after a Phone key", func(t *testing.T, newServer NewServer) {
		base := start(t, newServer, testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("sms", testkit.PerHour(2))), Options{Key: phoneJSON})
		bodies := []string{
			`{"phone":"+86 138-0013-8000","text":"hello"}`,
			`{"text":"same number, local form","phone":"13800138000"}`,
			`{"phone":"138 0013 8000"}`,
		}
		for i, b := range bodies[:2] {
			res := do(t, base, request{method: http.MethodPost, body: b})
			what := "request " + strconv.Itoa(i+1)
			wantStatus(t, what, res, http.StatusOK)
			if want := "ok len=" + strconv.Itoa(len(b)) + "\n"; res.body != want {
				t.Errorf("%s: handler answered %q, want %q: the body must stay readable", what, res.body, want)
			}
		}
		wantStatus(t, "third, same number", do(t, base, request{method: http.MethodPost, body: bodies[2]}), http.StatusTooManyRequests)
		res := do(t, base, request{method: http.MethodPost, body: `{"phone":"not a number"}`})
		wantStatus(t, "bad phone in body", res, http.StatusBadRequest)
		if res.body != badPhoneBody {
			t.Errorf("bad phone in body: body %q, want %q", res.body, badPhoneBody)
		}
		res = do(t, base, request{method: http.MethodPost, body: `{"phone":"+8613900139000","pad":"` + strings.Repeat("x", 100<<10) + `"}`})
		wantStatus(t, "oversized body", res, http.StatusRequestEntityTooLarge)
		if res.body != tooLargeBody {
			t.Errorf("oversized body: body %q, want %q", res.body, tooLargeBody)
		}
		wantHeaders(t, "oversized body", res, "Content-Type", textPlain, guard.HeaderLimit, "")
		res = do(t, base, request{method: http.MethodPost, body: `{"phone":`})
		wantStatus(t, "malformed body", res, http.StatusBadRequest)
	}},

	{"compressed body: at most the limit is inflated", func(t *testing.T, newServer NewServer) {
		l := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("gzip", testkit.PerHour(1)))
		base := start(t, newServer, l, Options{Key: phoneJSON, Decompress: true})
		gz := request{method: http.MethodPost, header: hdr("Content-Encoding", "gzip")}

		// The key is read from the decoded body, and the handler reads it
		// decoded, as the framework gives it.
		const plain = `{"phone":"+86 138-0013-8000","text":"hello"}`
		small := gz
		small.body = string(gzipped(t, 1, plain))
		res := do(t, base, small)
		wantStatus(t, "small gzip body", res, http.StatusOK)
		if want := "ok len=" + strconv.Itoa(len(plain)) + "\n"; res.body != want {
			t.Errorf("small gzip body: handler answered %q, want %q", res.body, want)
		}
		wantStatus(t, "same number, gzip again", do(t, base, small), http.StatusTooManyRequests)

		// 128 MiB of spaces in 128 KiB: refused once personal.Phone's 64
		// KiB are exceeded, without inflating the rest.
		bomb := gz
		bomb.body = string(gzipped(t, 128, strings.Repeat(" ", 1<<20)))
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		res = do(t, base, bomb)
		runtime.ReadMemStats(&after)
		// Other cases run in parallel: the bound leaves them room, far
		// below the 128 MiB of an unbounded inflate.
		if got := after.TotalAlloc - before.TotalAlloc; got > 32<<20 {
			t.Errorf("gzip bomb: the request allocated %d MiB, want at most 32 MiB", got>>20)
		}
		if res.status != http.StatusRequestEntityTooLarge || res.body != tooLargeBody {
			t.Errorf("gzip bomb: got %v, want 413 %q", res, tooLargeBody)
		}
	}},

	{"handler panic finishes the verdict as 500", func(t *testing.T, newServer NewServer) {
		for _, kind := range []string{"value", "abort"} {
			t.Run("count-if and added limit/"+kind, func(t *testing.T) {
				// Login: auth failures count on the account and the
				// client; a panic is a 500, refunded on both.
				account := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("panic-account", testkit.PerHour(1)))
				client := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("panic-client", testkit.PerHour(1)))
				base := start(t, newServer, account, Options{
					Key: userKey, CountIf: guard.StatusAuthFailure,
					Also: []Also{{Limiter: client, Key: tenantKey}},
				})
				as := hdr("X-User", "alice", "X-Tenant", "c1")
				res, err := try(base, request{query: "panic=" + kind, header: as})
				if kind == "value" && (err != nil || res.status != http.StatusInternalServerError) {
					t.Fatalf("panicking handler: %v, %v; want the recovery middleware's 500", res, err)
				}
				wantUsed(t, account, "alice", 0)
				wantUsed(t, client, "c1", 0)
				wantStatuses(t, "auth failures after the panic", statuses(t, base, request{query: "status=401", header: as}, 2), 401, 429)
			})
		}
		t.Run("reset-if", func(t *testing.T) {
			l := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("panic-reset", testkit.PerHour(3)))
			base := start(t, newServer, l, Options{
				Key: userKey, ResetIf: func(status int) bool { return status == http.StatusInternalServerError },
			})
			as := hdr("X-User", "bob")
			wantStatuses(t, "before the panic", statuses(t, base, request{header: as}, 2), 200, 200)
			wantUsed(t, l, "bob", 2)
			res := do(t, base, request{query: "panic=value", header: as})
			wantStatus(t, "panicking handler", res, http.StatusInternalServerError)
			wantUsed(t, l, "bob", 0)
		})
	}},

	{"problem+json for every refusal", func(t *testing.T, newServer NewServer) {
		problem := new(guard.BodyProblem)
		l := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("problem-all", testkit.PerHour(5)))
		base := start(t, newServer, l, Options{Key: phoneJSON, Body: problem})
		post := func(body string) request { return request{method: http.MethodPost, body: body} }
		for _, tc := range []struct {
			name   string
			rq     request
			status int
			title  string
			detail string
		}{
			{"bad phone", post(`{"phone":"0000000"}`), http.StatusBadRequest, "Bad Request", "invalid phone number"},
			{"malformed body", post(`{"phone":`), http.StatusBadRequest, "Bad Request", ""},
			{"oversized body", post(`{"phone":"+8613900139000","pad":"` + strings.Repeat("x", 100<<10) + `"}`),
				http.StatusRequestEntityTooLarge, "Content Too Large", "request body too large"},
		} {
			checkStatusProblem(t, tc.name, do(t, base, tc.rq), tc.status, tc.title, tc.detail)
		}

		nokey := start(t, newServer, testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("problem-nokey", testkit.PerHour(5))),
			Options{Key: userKey, NoKey: new(guard.NoKeyReject), Body: problem})
		checkStatusProblem(t, "no key", get(t, nokey), http.StatusBadRequest, "Bad Request", "missing or malformed rate-limit key")

		closed := testkit.Limiter(t, testkit.FailingStore{Err: errDown}, core.Policy{Name: "problem-closed", Rules: []core.Rule{{Limit: 5, Window: hour}}},
			core.WithFailurePolicy(core.FailClosed), core.WithBreaker(0, 0))
		res := get(t, start(t, newServer, closed, Options{Body: problem}))
		checkStatusProblem(t, "store down", res, http.StatusServiceUnavailable, "Service Unavailable", "rate limiter unavailable")
		wantHeaders(t, "store down", res, guard.HeaderRetryAfter, "1")
	}},

	{"WithAlso: a denial by one limit consumes nothing from the other", func(t *testing.T, newServer NewServer) {
		main := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("main", testkit.PerHour(2)))
		added := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("added", testkit.PerHour(3)))
		base := start(t, newServer, main, Options{
			Key:     userKey,
			Headers: new(guard.HeadersXRateLimit | guard.HeadersIETF),
			Body:    new(guard.BodyProblem),
			Also:    []Also{{Limiter: added, Key: tenantKey}},
		})
		as := func(user, tenant string) request {
			h := hdr("X-User", user)
			if tenant != "" {
				h.Set("X-Tenant", tenant)
			}
			return request{header: h}
		}
		wantStatuses(t, "alice at t1", statuses(t, base, as("alice", "t1"), 2), 200, 200)

		// Denied by the main limit: the added one is not asked.
		res := do(t, base, as("alice", "t1"))
		wantStatus(t, "alice over the main limit", res, http.StatusTooManyRequests)
		wantHeaders(t, "alice over the main limit", res, guard.HeaderLimit, "2", guard.HeaderRemaining, "0", guard.HeaderRetryAfter, "3600")
		checkProblem(t, "alice over the main limit", res, "main")
		wantUsed(t, added, "t1", 2)

		wantStatus(t, "bob at t1", do(t, base, as("bob", "t1")), http.StatusOK)
		wantUsed(t, added, "t1", 3)

		// Denied by the added limit: the main one's unit is given back, and
		// the answer names the added limit.
		for i := range 3 {
			res := do(t, base, as("carol", "t1"))
			what := "carol at a full t1, try " + strconv.Itoa(i+1)
			wantStatus(t, what, res, http.StatusTooManyRequests)
			wantHeaders(t, what, res, guard.HeaderLimit, "3", guard.HeaderRemaining, "0", guard.HeaderRetryAfter, "3600")
			checkIETF(t, what, res, []ietfItem{{name: "added", q: 3, w: 3600, r: 0, t: 3600}})
			checkProblem(t, what, res, "added")
			wantUsed(t, main, "carol", 0)
		}

		res = do(t, base, as("carol", "t2"))
		wantStatus(t, "carol at t2", res, http.StatusOK)
		wantHeaders(t, "carol at t2", res, guard.HeaderLimit, "2", guard.HeaderRemaining, "1")
		// Every limit that applies is advertised, the guard's own first.
		checkIETF(t, "carol at t2", res, []ietfItem{
			{name: "main", q: 2, w: 3600, r: 1, t: 3600},
			{name: "added", q: 3, w: 3600, r: 2, t: 3600, part: 1},
		})
		wantUsed(t, main, "carol", 1)
		wantUsed(t, added, "t2", 1)

		// No key for the added limit: only the main one applies.
		res = do(t, base, as("dave", ""))
		wantStatus(t, "dave without a tenant", res, http.StatusOK)
		wantHeaders(t, "dave without a tenant", res, guard.HeaderLimit, "2", guard.HeaderRemaining, "1")
		checkIETF(t, "dave without a tenant", res, []ietfItem{{name: "main", q: 2, w: 3600, r: 1, t: 3600}})
	}},

	{"stacked middlewares: every limit in the IETF fields", func(t *testing.T, newServer NewServer) {
		// Per client outside, a global cap inside, each a middleware of
		// its own: the answer lists both, neither erases the other.
		ietf := new(guard.HeadersIETF)
		perClient := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("per-client", testkit.PerHour(3)))
		global := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("global", testkit.PerHour(2), core.Rule{Limit: 10, Window: 24 * hour}))
		everyone := func(keyfunc.Request) (string, error) { return "all", nil }
		base := start(t, newServer, global, Options{Key: everyone, Headers: ietf,
			Outer: &Outer{Limiter: perClient, Options: Options{Key: userKey, Headers: ietf}}})
		alice := request{header: hdr("X-User", "alice")}
		for i := range 2 {
			res := do(t, base, alice)
			what := "alice " + strconv.Itoa(i+1)
			wantStatus(t, what, res, http.StatusOK)
			checkIETF(t, what, res, []ietfItem{
				{name: "per-client", q: 3, w: 3600, r: 2 - int64(i), t: 3600},
				{name: "global-3600s", q: 2, w: 3600, r: 1 - int64(i), t: 3600, part: 1},
				{name: "global-86400s", q: 10, w: 86400, r: 9 - int64(i), t: 86400, part: 1},
			})
		}
		// Denied inside: the outer limit's item stays beside the denial's.
		res := do(t, base, request{header: hdr("X-User", "bob")})
		wantStatus(t, "bob, the global cap full", res, http.StatusTooManyRequests)
		checkIETF(t, "bob, the global cap full", res, []ietfItem{
			{name: "per-client", q: 3, w: 3600, r: 2, t: 3600},
			{name: "global-3600s", q: 2, w: 3600, r: 0, t: 3600, part: 1},
			{name: "global-86400s", q: 10, w: 86400, r: 8, t: 86400, part: 1},
		})
	}},

	{"WithAlso with count-if and reset-if", func(t *testing.T, newServer NewServer) {
		// Login: failures count on the account and on the client; a
		// success resets the account and is not counted on the client.
		account := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("account", testkit.PerHour(2)))
		client := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("client", testkit.PerHour(3)))
		base := start(t, newServer, account, Options{
			Key:     userKey,
			CountIf: func(status int) bool { return status >= 400 },
			ResetIf: func(status int) bool { return status == http.StatusOK },
			Also:    []Also{{Limiter: client, Key: tenantKey}},
		})
		fail := request{query: "status=401&return_error=1", header: hdr("X-User", "alice", "X-Tenant", "c1")}
		ok := request{header: hdr("X-User", "alice", "X-Tenant", "c1")}
		wantStatus(t, "failure", do(t, base, fail), http.StatusUnauthorized)
		wantUsed(t, account, "alice", 1)
		wantUsed(t, client, "c1", 1)
		wantStatuses(t, "successes", statuses(t, base, ok, 5), 200, 200, 200, 200, 200)
		wantUsed(t, account, "alice", 0)
		wantUsed(t, client, "c1", 1)
		wantStatuses(t, "failures", statuses(t, base, fail, 3), 401, 401, 429)
		wantUsed(t, client, "c1", 3)
	}},

	{"exact admission under concurrency", func(t *testing.T, newServer NewServer) {
		base := start(t, newServer, testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("burst", testkit.PerHour(5))), Options{})
		const n = 50
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			seen = map[int]int{}
		)
		for range n {
			wg.Go(func() {
				s := get(t, base).status
				mu.Lock()
				seen[s]++
				mu.Unlock()
			})
		}
		wg.Wait()
		if want := map[int]int{200: 5, 429: n - 5}; !reflect.DeepEqual(seen, want) {
			t.Errorf("%d concurrent requests against limit 5: statuses %v, want %v", n, seen, want)
		}
	}},

	{"fail closed answers 503", func(t *testing.T, newServer NewServer) {
		// One observer for the limiter and the middleware: each event once.
		obs := &testkit.Events{}
		l := testkit.Limiter(t, testkit.FailingStore{Err: errDown}, core.Policy{Name: "closed", Rules: []core.Rule{{Limit: 5, Window: hour}}},
			core.WithFailurePolicy(core.FailClosed), core.WithBreaker(0, 0), core.WithObserver(obs))
		base := start(t, newServer, l, Options{Observer: obs})
		res := get(t, base)
		wantStatus(t, "store down", res, http.StatusServiceUnavailable)
		if res.body != unavailableBody {
			t.Errorf("store down: body %q, want %q", res.body, unavailableBody)
		}
		wantHeaders(t, "store down", res, guard.HeaderRetryAfter, "1", guard.HeaderLimit, "", "Content-Type", textPlain)
		if bytes.Contains([]byte(res.body), []byte(errDown.Error())) {
			t.Errorf("store down: body %q leaks the store error", res.body)
		}
		var storeErrs int
		for _, e := range obs.All() {
			if e.Kind == core.EventStoreError {
				storeErrs++
			}
		}
		if storeErrs != 1 {
			t.Errorf("observer saw %d store errors, want 1", storeErrs)
		}
	}},

	{"fail open passes without headers", func(t *testing.T, newServer NewServer) {
		l := testkit.Limiter(t, testkit.FailingStore{Err: errDown}, core.Policy{Name: "open", Rules: []core.Rule{{Limit: 1, Window: hour}}},
			core.WithFailurePolicy(core.FailOpen))
		base := start(t, newServer, l, Options{})
		for range 3 {
			res := get(t, base)
			wantStatus(t, "store down", res, http.StatusOK)
			wantHeaders(t, "store down", res, guard.HeaderLimit, "", guard.HeaderRetryAfter, "")
		}
	}},

	{"InFlight: at most K in flight, each released when its handler ends", func(t *testing.T, newServer NewServer) {
		l := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "export", InFlight: 2})
		base := start(t, newServer, l, Options{Key: userKey, Headers: new(guard.HeadersXRateLimit | guard.HeadersIETF)})
		alice := hdr("X-User", "alice")
		g := newGate(t)
		held := make(chan response, 2)
		for range 2 {
			go func() {
				res, err := try(base, request{query: "hold=" + g.name, header: alice})
				if err != nil {
					t.Error(err)
				}
				held <- res
			}()
		}
		for i := range 2 {
			select {
			case <-g.arrived:
			case <-time.After(10 * time.Second):
				t.Fatalf("%d of 2 held requests reached the handler within 10s", i)
			}
		}
		res := do(t, base, request{header: alice})
		wantStatus(t, "third while two run", res, http.StatusTooManyRequests)
		if want := "rate limit exceeded: retry after 1s\n"; res.body != want {
			t.Errorf("third while two run: body %q, want %q", res.body, want)
		}
		wantHeaders(t, "third while two run", res,
			guard.HeaderLimit, "2", guard.HeaderRemaining, "0", guard.HeaderReset, "", guard.HeaderRetryAfter, "1")
		checkIETF(t, "third while two run", res, []ietfItem{{name: "export", q: 2, r: 0, qu: "concurrent-requests"}})
		wantStatus(t, "bob while alice's two run", do(t, base, request{header: hdr("X-User", "bob")}), http.StatusOK)
		g.release()
		var remaining []string
		for range 2 {
			res := <-held
			wantStatus(t, "held request", res, http.StatusOK)
			wantHeaders(t, "held request", res, guard.HeaderReset, "")
			remaining = append(remaining, res.header.Get(guard.HeaderRemaining))
		}
		if slices.Sort(remaining); !slices.Equal(remaining, []string{"0", "1"}) {
			t.Errorf("held requests: X-RateLimit-Remaining %v, want 1 and 0", remaining)
		}
		wantUsed(t, l, "alice", 0)
		// Every way a handler ends releases its lease: more requests than
		// the limit, one after the other, never meet a 429.
		for _, end := range []struct {
			query  string
			status int
		}{{"", 200}, {"status=503", 503}, {"panic=value", 500}, {"return_error=plain", 500}, {"status=404&return_error=1", 404}} {
			got := statuses(t, base, request{query: end.query, header: alice}, 3)
			wantStatuses(t, "handler ending "+end.query, got, end.status, end.status, end.status)
			wantUsed(t, l, "alice", 0)
		}
	}},

	{"InFlight with WithAlso: a denial by either consumes nothing of the other", func(t *testing.T, newServer NewServer) {
		store := core.NewMemoryStore()
		conc := testkit.Limiter(t, store, core.Policy{Name: "conc", InFlight: 1})
		rate := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("rate", testkit.PerHour(3)))
		base := start(t, newServer, conc, Options{Key: userKey, Also: []Also{{Limiter: rate, Key: userKey}}})
		alice := hdr("X-User", "alice")
		g := newGate(t)
		held := make(chan response, 1)
		go func() {
			res, err := try(base, request{query: "hold=" + g.name, header: alice})
			if err != nil {
				t.Error(err)
			}
			held <- res
		}()
		select {
		case <-g.arrived:
		case <-time.After(10 * time.Second):
			t.Fatal("the held request did not reach the handler within 10s")
		}
		res := do(t, base, request{header: alice})
		wantStatus(t, "second while one runs", res, http.StatusTooManyRequests)
		wantHeaders(t, "second while one runs", res, guard.HeaderLimit, "1", guard.HeaderRetryAfter, "1")
		wantUsed(t, rate, "alice", 1)
		g.release()
		wantStatus(t, "held request", <-held, http.StatusOK)
		wantStatuses(t, "after it ended", statuses(t, base, request{header: alice}, 3), 200, 200, 429)
		wantUsed(t, rate, "alice", 3)
		wantUsed(t, conc, "alice", 0)
	}},

	{"fail local keeps limiting", func(t *testing.T, newServer NewServer) {
		l := testkit.Limiter(t, testkit.FailingStore{Err: errDown}, core.Policy{Name: "local", Rules: []core.Rule{{Limit: 2, Window: hour}}})
		base := start(t, newServer, l, Options{})
		res := get(t, base)
		wantStatus(t, "first", res, http.StatusOK)
		wantHeaders(t, "first", res, guard.HeaderLimit, "2", guard.HeaderRemaining, "1")
		wantStatuses(t, "then", statuses(t, base, request{}, 2), 200, 429)
	}},
}

// ietfItem is one expected item of RateLimit-Policy and RateLimit.
type ietfItem struct {
	name       string
	q, w, r, t int64
	qu         string // the quota unit; "" for none (requests), and then w and t are present
	// part numbers the partition (one limit and key): items of one part
	// share their pk, items of different parts have different ones.
	part int
}

// checkIETF parses the IETF fields back as structured-field lists.
func checkIETF(t *testing.T, what string, res response, want []ietfItem) {
	t.Helper()
	pol, err := httpsfv.UnmarshalList(res.header.Values(guard.HeaderPolicy))
	if err != nil {
		t.Fatalf("%s: %s %q: %v", what, guard.HeaderPolicy, res.header.Values(guard.HeaderPolicy), err)
	}
	cur, err := httpsfv.UnmarshalList(res.header.Values(guard.HeaderRateLimit))
	if err != nil {
		t.Fatalf("%s: %s %q: %v", what, guard.HeaderRateLimit, res.header.Values(guard.HeaderRateLimit), err)
	}
	if len(pol) != len(want) || len(cur) != len(want) {
		t.Fatalf("%s: %d policy and %d limit items, want %d: %q / %q", what, len(pol), len(cur), len(want),
			res.header.Values(guard.HeaderPolicy), res.header.Values(guard.HeaderRateLimit))
	}
	pks := map[int][]byte{}
	for i, w := range want {
		p, ok1 := pol[i].(httpsfv.Item)
		c, ok2 := cur[i].(httpsfv.Item)
		if !ok1 || !ok2 {
			t.Fatalf("%s: item %d is an inner list", what, i)
		}
		if p.Value != w.name || c.Value != w.name {
			t.Errorf("%s: item %d named %v / %v, want %q", what, i, p.Value, c.Value, w.name)
		}
		param := func(ps *httpsfv.Params, name string) any {
			v, _ := ps.Get(name)
			return v
		}
		wantW, wantT, wantQU := any(w.w), any(w.t), any(nil)
		if w.qu != "" {
			// No window, nothing resets at a time.
			wantW, wantT, wantQU = nil, nil, w.qu
		}
		if q, wi, qu := param(p.Params, "q"), param(p.Params, "w"), param(p.Params, "qu"); q != w.q || wi != wantW || qu != wantQU {
			t.Errorf("%s: policy item %d q=%v w=%v qu=%v, want q=%d w=%v qu=%v", what, i, q, wi, qu, w.q, wantW, wantQU)
		}
		if r, tt := param(c.Params, "r"), param(c.Params, "t"); r != w.r || tt != wantT {
			t.Errorf("%s: limit item %d r=%v t=%v, want r=%d t=%v", what, i, r, tt, w.r, wantT)
		}
		ppk, ok1 := param(p.Params, "pk").([]byte)
		cpk, ok2 := param(c.Params, "pk").([]byte)
		if !ok1 || !ok2 || len(ppk) == 0 || !bytes.Equal(ppk, cpk) {
			t.Errorf("%s: item %d pk %v / %v, want one non-empty byte sequence", what, i, param(p.Params, "pk"), param(c.Params, "pk"))
		}
		for part, pk := range pks {
			if (part == w.part) != bytes.Equal(pk, ppk) {
				t.Errorf("%s: item %d (partition %d) pk %v, partition %d's %v: one limit and key, one partition", what, i, w.part, ppk, part, pk)
			}
		}
		pks[w.part] = ppk
	}
}
