package guard_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/keyfunc"
)

// request is a fake keyfunc.Request: headers and query from maps, the
// peer address as given.
type request struct {
	ctx    context.Context
	header map[string]string
	query  map[string]string
	peer   string
}

func (r *request) Context() context.Context {
	if r.ctx == nil {
		return context.Background()
	}
	return r.ctx
}
func (r *request) Method() string                  { return "GET" }
func (r *request) Route() string                   { return "/r" }
func (r *request) Path() string                    { return "/r" }
func (r *request) Header(name string) string       { return r.header[name] }
func (r *request) Values(name string) []string     { return nil }
func (r *request) Query(name string) string        { return r.query[name] }
func (r *request) RemoteAddr() string              { return r.peer }
func (r *request) Value(any) any                   { return nil }
func (r *request) Body(int64) ([]byte, error)      { return nil, nil }
func (r *request) with(kv ...string) *request      { return r.set(r.header, kv) }
func (r *request) withQuery(kv ...string) *request { return r.set(r.query, kv) }

func (r *request) set(m map[string]string, kv []string) *request {
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return r
}

func req() *request {
	return &request{header: map[string]string{}, query: map[string]string{}, peer: "192.0.2.1:1234"}
}

// cost reads the cost from the query.
func cost(r keyfunc.Request) int64 {
	var n int64
	_, _ = fmt.Sscan(r.Query("cost"), &n)
	return n
}

// headers returns the header fields a verdict writes.
func headers(v *guard.Verdict) map[string]string {
	h := map[string]string{}
	v.WriteHeaders(func(k, val string) { h[k] = val })
	return h
}

// step is one request of a table case and what its verdict must be.
type step struct {
	r       *request
	want    guard.Outcome
	status  int               // Finish(status) when admitted; 0: not called
	headers map[string]string // fields that must be set ("" = absent)
	body    string            // the answer's body, when it does not proceed
}

func TestAdmit(t *testing.T) {
	ctx := context.Background()
	mem := core.NewMemoryStore
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T) (*core.Limiter, []guard.Option)
		steps []step
		after func(t *testing.T, l *core.Limiter)
	}{
		{
			name: "allow then deny, with X-RateLimit headers",
			setup: func(t *testing.T) (*core.Limiter, []guard.Option) {
				return testkit.Limiter(t, mem(), testkit.Policy("basic", testkit.PerHour(2))), nil
			},
			steps: []step{
				{r: req(), want: guard.OutcomeAllow, headers: map[string]string{guard.HeaderLimit: "2", guard.HeaderRemaining: "1", guard.HeaderReset: "3600", guard.HeaderRetryAfter: ""}},
				{r: req(), want: guard.OutcomeAllow, headers: map[string]string{guard.HeaderRemaining: "0"}},
				{r: req(), want: guard.OutcomeDeny, headers: map[string]string{guard.HeaderRemaining: "0", guard.HeaderRetryAfter: "3600"},
					body: "rate limit exceeded: retry after 3600s\n"},
				// Another client IP is another key.
				{r: func() *request { r := req(); r.peer = "192.0.2.2:1"; return r }(), want: guard.OutcomeAllow},
			},
		},
		{
			name: "skip predicate",
			setup: func(t *testing.T) (*core.Limiter, []guard.Option) {
				return testkit.Limiter(t, mem(), testkit.Policy("skip", testkit.PerHour(1))), []guard.Option{guard.WithSkip(func(r keyfunc.Request) bool { return r.Header("X-Health") != "" })}
			},
			steps: []step{
				{r: req().with("X-Health", "1"), want: guard.OutcomeSkip, headers: map[string]string{guard.HeaderLimit: ""}},
				{r: req().with("X-Health", "1"), want: guard.OutcomeSkip},
				{r: req(), want: guard.OutcomeAllow},
				{r: req(), want: guard.OutcomeDeny},
			},
		},
		{
			name: "no key: skipped by default",
			setup: func(t *testing.T) (*core.Limiter, []guard.Option) {
				return testkit.Limiter(t, mem(), testkit.Policy("nokey", testkit.PerHour(1))), []guard.Option{guard.WithKey(testkit.UserKey)}
			},
			steps: []step{
				{r: req(), want: guard.OutcomeSkip}, {r: req(), want: guard.OutcomeSkip},
				{r: req().with("X-User", "a"), want: guard.OutcomeAllow}, {r: req().with("X-User", "a"), want: guard.OutcomeDeny},
			},
		},
		{
			name: "no key: shared bucket",
			setup: func(t *testing.T) (*core.Limiter, []guard.Option) {
				return testkit.Limiter(t, mem(), testkit.Policy("shared", testkit.PerHour(1))), []guard.Option{guard.WithKey(testkit.UserKey), guard.WithNoKey(guard.NoKeyShared)}
			},
			steps: []step{{r: req(), want: guard.OutcomeAllow}, {r: req(), want: guard.OutcomeDeny}},
			after: func(t *testing.T, l *core.Limiter) {
				if d, _ := l.Peek(context.Background(), guard.SharedKey); d.Allowed {
					t.Errorf("Peek(SharedKey) = allowed, want the shared key full")
				}
			},
		},
		{
			name: "no key: rejected",
			setup: func(t *testing.T) (*core.Limiter, []guard.Option) {
				return testkit.Limiter(t, mem(), testkit.Policy("reject", testkit.PerHour(1))), []guard.Option{guard.WithKey(testkit.UserKey), guard.WithNoKey(guard.NoKeyReject)}
			},
			steps: []step{{r: req(), want: guard.OutcomeInvalid, body: "bad request: missing or malformed rate-limit key\n"}},
		},
		{
			name: "malformed key: rejected, or skipped as configured",
			setup: func(t *testing.T) (*core.Limiter, []guard.Option) {
				return testkit.Limiter(t, mem(), testkit.Policy("badkey", testkit.PerHour(1))), []guard.Option{guard.WithKey(testkit.UserKey)}
			},
			steps: []step{{r: req().with("X-User", "!"), want: guard.OutcomeInvalid, headers: map[string]string{guard.HeaderLimit: ""}}},
		},
		{
			name: "malformed key skipped",
			setup: func(t *testing.T) (*core.Limiter, []guard.Option) {
				return testkit.Limiter(t, mem(), testkit.Policy("badkey-skip", testkit.PerHour(1))), []guard.Option{guard.WithKey(testkit.UserKey), guard.WithKeyError(guard.KeyErrorSkip)}
			},
			steps: []step{{r: req().with("X-User", "!"), want: guard.OutcomeSkip}, {r: req().with("X-User", "!"), want: guard.OutcomeSkip}},
		},
		{
			name: "cost: weights, below 1 is malformed, above the limit never fits",
			setup: func(t *testing.T) (*core.Limiter, []guard.Option) {
				return testkit.Limiter(t, mem(), testkit.Policy("cost", testkit.PerHour(10))), []guard.Option{guard.WithCost(cost)}
			},
			steps: []step{
				{r: req().withQuery("cost", "3"), want: guard.OutcomeAllow, headers: map[string]string{guard.HeaderRemaining: "7"}},
				{r: req().withQuery("cost", "0"), want: guard.OutcomeInvalid, body: "bad request: invalid request cost\n"},
				{r: req().withQuery("cost", "-5"), want: guard.OutcomeInvalid},
				{r: req().withQuery("cost", "11"), want: guard.OutcomeDeny, headers: map[string]string{guard.HeaderRetryAfter: "", guard.HeaderLimit: ""},
					body: "rate limit exceeded: the request costs more than the limit allows\n"},
				{r: req().withQuery("cost", "7"), want: guard.OutcomeAllow, headers: map[string]string{guard.HeaderRemaining: "0"}},
			},
		},
		{
			name: "dry run lets denials through without headers",
			setup: func(t *testing.T) (*core.Limiter, []guard.Option) {
				return testkit.Limiter(t, mem(), testkit.Policy("dry", testkit.PerHour(1))), []guard.Option{guard.WithDryRun(true)}
			},
			steps: []step{
				{r: req(), want: guard.OutcomeAllow, headers: map[string]string{guard.HeaderLimit: "1"}},
				{r: req(), want: guard.OutcomeAllow, headers: map[string]string{guard.HeaderLimit: "", guard.HeaderRetryAfter: ""}},
			},
		},
		{
			name: "count only failures",
			setup: func(t *testing.T) (*core.Limiter, []guard.Option) {
				return testkit.Limiter(t, mem(), testkit.Policy("login", testkit.PerHour(2))), []guard.Option{guard.WithCountIf(guard.StatusAuthFailure)}
			},
			steps: []step{
				{r: req(), want: guard.OutcomeAllow, status: 200},
				{r: req(), want: guard.OutcomeAllow, status: 200},
				{r: req(), want: guard.OutcomeAllow, status: 401},
				{r: req(), want: guard.OutcomeAllow, status: 403},
				{r: req(), want: guard.OutcomeDeny},
			},
		},
		{
			name: "reset on success",
			setup: func(t *testing.T) (*core.Limiter, []guard.Option) {
				return testkit.Limiter(t, mem(), testkit.Policy("reset", testkit.PerHour(2))), []guard.Option{guard.WithResetIf(guard.StatusSuccess)}
			},
			steps: []step{
				{r: req(), want: guard.OutcomeAllow, status: 401},
				{r: req(), want: guard.OutcomeAllow, status: 204},
				{r: req(), want: guard.OutcomeAllow, headers: map[string]string{guard.HeaderRemaining: "1"}},
			},
		},
		{
			name: "FailClosed is 503 with Retry-After",
			setup: func(t *testing.T) (*core.Limiter, []guard.Option) {
				l := testkit.Limiter(t, testkit.FailingStore{Err: errDown}, core.Policy{Name: "closed", Rules: []core.Rule{testkit.PerHour(5)}},
					core.WithFailurePolicy(core.FailClosed), core.WithBreaker(0, 0))
				return l, nil
			},
			steps: []step{{r: req(), want: guard.OutcomeUnavailable, headers: map[string]string{guard.HeaderRetryAfter: "1", guard.HeaderLimit: ""},
				body: "service unavailable: rate limiter unavailable\n"}},
		},
		{
			name: "a request whose context ended",
			setup: func(t *testing.T) (*core.Limiter, []guard.Option) {
				return testkit.Limiter(t, remote{mem()}, testkit.Policy("ctx", testkit.PerHour(5))), nil
			},
			steps: []step{{r: func() *request {
				r := req()
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				r.ctx = ctx
				return r
			}(), want: guard.OutcomeUnavailable}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, opts := tc.setup(t)
			g := guard.New(l, opts...)
			for i, s := range tc.steps {
				v := g.Admit(s.r.Context(), s.r)
				if v.Outcome != s.want {
					t.Fatalf("step %d: Admit = %v (err %v), want %v", i, v.Outcome, v.Err, s.want)
				}
				h := headers(&v)
				for k, want := range s.headers {
					if h[k] != want {
						t.Errorf("step %d: header %s = %q, want %q (all: %v)", i, k, h[k], want, h)
					}
				}
				if s.body != "" {
					if _, body := v.Answer(func(string, string) {}); string(body) != s.body {
						t.Errorf("step %d: body %q, want %q", i, body, s.body)
					}
				}
				if s.status != 0 {
					v.Finish(ctx, s.status)
				}
			}
			if tc.after != nil {
				tc.after(t, l)
			}
		})
	}
}

// TestAlso covers limits decided together: a denial by one refunds the
// others, and a limit without a key leaves the others deciding.
func TestAlso(t *testing.T) {
	ctx := context.Background()
	t.Run("denial refunds the others", func(t *testing.T) {
		phone := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("phone", testkit.PerHour(5)))
		ip := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("ip", testkit.PerHour(1)))
		g := guard.New(phone, guard.WithKey(testkit.UserKey), guard.WithAlso(ip, keyfunc.ClientIP()))
		if v := g.Admit(ctx, req().with("X-User", "a")); v.Outcome != guard.OutcomeAllow {
			t.Fatalf("first = %v, want allow", v.Outcome)
		}
		v := g.Admit(ctx, req().with("X-User", "b"))
		if v.Outcome != guard.OutcomeDeny || v.Limiter() != ip {
			t.Fatalf("second = %v by %v, want denied by the ip limit", v.Outcome, v.Limiter().Policy().Name)
		}
		if d, _ := phone.Peek(ctx, "b"); d.Remaining != 5 {
			t.Errorf("phone b after the ip denial: Remaining %d, want 5 (refunded)", d.Remaining)
		}
	})
	t.Run("the guard's own key missing, the added limit still decides", func(t *testing.T) {
		users := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("user", testkit.PerHour(100)))
		ip := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("ip", testkit.PerHour(3)))
		g := guard.New(users, guard.WithKey(testkit.UserKey), guard.WithAlso(ip, keyfunc.ClientIP()))
		var got []guard.Outcome
		for range 5 {
			v := g.Admit(ctx, req()) // anonymous
			got = append(got, v.Outcome)
			if v.Outcome == guard.OutcomeAllow && v.Limiter() != ip {
				t.Errorf("anonymous request admitted by %s, want the ip limit", v.Limiter().Policy().Name)
			}
		}
		want := []guard.Outcome{guard.OutcomeAllow, guard.OutcomeAllow, guard.OutcomeAllow, guard.OutcomeDeny, guard.OutcomeDeny}
		if !slices.Equal(got, want) {
			t.Errorf("anonymous requests from one IP: %v, want %v", got, want)
		}
	})
	t.Run("an added limit without a key is skipped alone", func(t *testing.T) {
		ips := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("ip", testkit.PerHour(2)))
		users := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("user", testkit.PerHour(1)))
		g := guard.New(ips, guard.WithAlso(users, testkit.UserKey))
		for i, want := range []guard.Outcome{guard.OutcomeAllow, guard.OutcomeAllow, guard.OutcomeDeny} {
			if v := g.Admit(ctx, req()); v.Outcome != want {
				t.Errorf("request %d = %v, want %v", i, v.Outcome, want)
			}
		}
	})
	t.Run("count-if refunds every limit", func(t *testing.T) {
		a := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("a", testkit.PerHour(1)))
		b := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("b", testkit.PerHour(1)))
		g := guard.New(a, guard.WithAlso(b, keyfunc.ClientIP()), guard.WithCountIf(guard.StatusAuthFailure))
		for i := range 3 {
			v := g.Admit(ctx, req())
			if v.Outcome != guard.OutcomeAllow {
				t.Fatalf("request %d = %v, want allow (successes refunded)", i, v.Outcome)
			}
			v.Finish(ctx, 200)
		}
	})
}

// TestObserverLayers: the guard reports what only it knows; the limiter
// reports decisions. One observer given to both sees each event once.
func TestObserverLayers(t *testing.T) {
	ctx := context.Background()
	obs := &testkit.Events{}
	l := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "obs", Rules: []core.Rule{testkit.PerHour(1)}}, core.WithObserver(obs))
	g := guard.New(l, guard.WithKey(testkit.UserKey), guard.WithDryRun(true), guard.WithObserver(obs))
	for _, u := range []string{"a", "a", "a", "", "!"} {
		if v := g.Admit(ctx, req().with("X-User", u)); !v.Proceed() && v.Outcome != guard.OutcomeInvalid {
			t.Fatalf("user %q: %v", u, v.Outcome)
		}
	}
	for kind, want := range map[core.EventKind]int{core.EventDecision: 3, guard.EventDryRun: 2, guard.EventSkip: 1, guard.EventKeyError: 1} {
		if got := obs.Count(kind); got != want {
			t.Errorf("%v events = %d, want %d", kind, got, want)
		}
	}
}

// TestIETFItemNames: every rule of a policy has a name of its own in the
// IETF fields, even where windows round to the same second.
func TestIETFItemNames(t *testing.T) {
	ctx := context.Background()
	for _, rules := range [][]core.Rule{
		{{Limit: 3, Window: 1500 * time.Millisecond}, {Limit: 5, Window: 2 * time.Second}},
		{{Limit: 1, Window: time.Millisecond}, {Limit: 9, Window: 500 * time.Millisecond}},
		{{Limit: 1, Window: time.Minute}, {Limit: 5, Window: time.Hour}, {Limit: 10, Window: 24 * time.Hour}},
	} {
		g := guard.New(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("p", rules...)), guard.WithHeaders(guard.HeadersIETF))
		v := g.Admit(ctx, req())
		pol := headers(&v)[guard.HeaderPolicy]
		names := map[string]bool{}
		for _, item := range strings.Split(pol, ", ") {
			name, _, _ := strings.Cut(item, ";")
			if names[name] {
				t.Errorf("rules %v: RateLimit-Policy %q names %s twice", rules, pol, name)
			}
			names[name] = true
		}
		if len(names) != len(rules) {
			t.Errorf("rules %v: RateLimit-Policy %q has %d names, want %d", rules, pol, len(names), len(rules))
		}
	}
}

// TestProblemBody: a BodyProblem denial is RFC 9457 JSON naming the
// binding rule.
func TestProblemBody(t *testing.T) {
	ctx := context.Background()
	g := guard.New(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("sms", core.Rule{Limit: 1, Window: time.Minute}, testkit.PerHour(5))),
		guard.WithBody(guard.BodyProblem))
	g.Admit(ctx, req())
	v := g.Admit(ctx, req())
	ct := ""
	status, body := v.Answer(func(k, val string) {
		if k == "Content-Type" {
			ct = val
		}
	})
	var doc struct {
		Type       string   `json:"type"`
		Status     int      `json:"status"`
		Violated   []string `json:"violated-policies"`
		RetryAfter int      `json:"retry-after"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	if status != 429 || ct != "application/problem+json" || doc.Type != guard.ProblemType || doc.Status != 429 ||
		len(doc.Violated) != 1 || doc.Violated[0] != "sms-60s" || doc.RetryAfter != 60 {
		t.Errorf("answer %d %s %+v, want 429 problem+json naming sms-60s, retry-after 60", status, ct, doc)
	}
}

// TestNatives: adapter settings given with Native reach the adapter's
// targets by type, and a setting of another adapter is refused.
func TestNatives(t *testing.T) {
	type (
		deny    string
		methods []string
	)
	l := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("n", testkit.PerHour(1)))
	g := guard.New(l, guard.Native(deny("a")), guard.WithKey(testkit.UserKey), guard.Native(methods{"x"}), guard.Native(deny("b")), guard.Native(methods{"y"}))
	var (
		d  deny
		ms []methods
	)
	g.ReadNatives("test", &d, &ms)
	if d != "b" || fmt.Sprint(ms) != "[[x] [y]]" {
		t.Errorf("ReadNatives: deny %q, methods %v; want the last deny (b) and every methods ([[x] [y]])", d, ms)
	}
	if g.NeedsFinish() {
		t.Error("NeedsFinish() without count-if or reset-if = true")
	}
	defer func() {
		if msg := fmt.Sprint(recover()); !strings.Contains(msg, "other.New") || !strings.Contains(msg, "another adapter") {
			t.Errorf("panic %q, want one naming the adapter and the foreign option", msg)
		}
	}()
	guard.New(l, guard.Native(42)).ReadNatives("other.New", &d)
}

func TestPanics(t *testing.T) {
	l := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("p", testkit.PerHour(1)))
	for name, f := range map[string]func(){
		"New(nil)":           func() { guard.New(nil) },
		"WithAlso(nil, key)": func() { guard.WithAlso(nil, testkit.UserKey) },
		"WithAlso(l, nil)":   func() { guard.WithAlso(l, nil) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if msg := fmt.Sprint(recover()); !strings.HasPrefix(msg, "ratekit: guard.") {
					t.Errorf("panic %q, want a message naming the guard function", msg)
				}
			}()
			f()
		})
	}
}

// failing is a store that fails every call.
var errDown = errors.New("store down")

// remote hides that a store is a MemoryStore, so that the limiter treats
// it as a store with a timeout and a deny cache.
type remote struct{ core.Store }

// TestRefusalAnswers: every refusal has its status and a fixed body; under
// BodyProblem every one of them is RFC 9457 problem+json with the same
// fixed detail, never an error's text.
func TestRefusalAnswers(t *testing.T) {
	ctx := context.Background()
	// key refuses as the X-Case header says.
	key := func(r keyfunc.Request) (string, error) {
		switch r.Header("X-Case") {
		case "big":
			return "", fmt.Errorf("wrapped: %w", keyfunc.BodyTooLarge(10))
		case "bad":
			return "", errors.New("secret detail")
		case "phone":
			return "", reasoned{}
		}
		return "k", nil
	}
	open := func(t *testing.T) *core.Limiter {
		return testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("p", testkit.PerHour(1)))
	}
	closed := func(t *testing.T) *core.Limiter {
		l := testkit.Limiter(t, testkit.FailingStore{Err: errDown}, core.Policy{Name: "closed", Rules: []core.Rule{testkit.PerHour(5)}},
			core.WithFailurePolicy(core.FailClosed), core.WithBreaker(0, 0))
		return l
	}
	tests := []struct {
		name    string
		limiter func(t *testing.T) *core.Limiter
		r       *request
		status  int
		text    string // the BodyText body
		title   string // the BodyProblem title
		detail  string // the BodyProblem detail
	}{
		{"body too large", open, req().with("X-Case", "big"), 413,
			"content too large: request body too large\n", "Content Too Large", "request body too large"},
		{"malformed key", open, req().with("X-Case", "bad"), 400,
			"bad request: missing or malformed rate-limit key\n", "Bad Request", "missing or malformed rate-limit key"},
		{"malformed key with a reason", open, req().with("X-Case", "phone"), 400,
			"bad request: invalid phone number\n", "Bad Request", "invalid phone number"},
		{"invalid cost", open, req().withQuery("cost", "0"), 400,
			"bad request: invalid request cost\n", "Bad Request", "invalid request cost"},
		{"store down under FailClosed", closed, req(), 503,
			"service unavailable: rate limiter unavailable\n", "Service Unavailable", "rate limiter unavailable"},
	}
	for _, tc := range tests {
		for _, style := range []guard.BodyStyle{guard.BodyText, guard.BodyProblem} {
			t.Run(fmt.Sprintf("%s/style %d", tc.name, style), func(t *testing.T) {
				opts := []guard.Option{guard.WithKey(key), guard.WithBody(style)}
				if tc.r.query["cost"] != "" {
					opts = append(opts, guard.WithCost(cost))
				}
				g := guard.New(tc.limiter(t), opts...)
				v := g.Admit(ctx, tc.r)
				h := map[string]string{}
				status, body := v.Answer(func(k, val string) { h[k] = val })
				if v.Status() != tc.status || status != tc.status {
					t.Errorf("Status() = %d, Answer status %d; want %d", v.Status(), status, tc.status)
				}
				if h["X-Content-Type-Options"] != "nosniff" {
					t.Errorf("X-Content-Type-Options %q, want nosniff", h["X-Content-Type-Options"])
				}
				if strings.Contains(string(body), "secret") || strings.Contains(string(body), "wrapped") {
					t.Errorf("body %q leaks the error", body)
				}
				if style == guard.BodyText {
					if ct := h["Content-Type"]; ct != "text/plain; charset=utf-8" || string(body) != tc.text {
						t.Errorf("answer %s %q, want text/plain %q", ct, body, tc.text)
					}
					return
				}
				if ct := h["Content-Type"]; ct != "application/problem+json" {
					t.Errorf("Content-Type %q, want application/problem+json", ct)
				}
				var doc map[string]any
				if err := json.Unmarshal(body, &doc); err != nil {
					t.Fatalf("body %q is not JSON: %v", body, err)
				}
				want := map[string]any{"type": "about:blank", "title": tc.title, "status": float64(tc.status), "detail": tc.detail}
				if fmt.Sprint(doc) != fmt.Sprint(want) {
					t.Errorf("problem %v, want %v", doc, want)
				}
			})
		}
	}
}

// reasoned is a key error with a client-safe reason, as personal.Phone
// returns.
type reasoned struct{}

func (reasoned) Error() string  { return "secret detail: +86 138" }
func (reasoned) Reason() string { return "invalid phone number" }

// TestBlock: a blocked request is refused before skip and decision, in
// dry-run mode too, and reported once.
func TestBlock(t *testing.T) {
	ctx := context.Background()
	obs := &testkit.Events{}
	blocked := func(r keyfunc.Request) bool { return r.Header("X-User") == "mallory" }
	for _, dry := range []bool{false, true} {
		l := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("block", testkit.PerHour(1)))
		g := guard.New(l, guard.WithKey(testkit.UserKey), guard.WithBlock(blocked), guard.WithSkip(func(keyfunc.Request) bool { return true }),
			guard.WithDryRun(dry), guard.WithObserver(obs))
		v := g.Admit(ctx, req().with("X-User", "mallory"))
		if v.Outcome != guard.OutcomeBlocked || v.Proceed() || v.Status() != 403 || len(headers(&v)) != 0 {
			t.Errorf("dry-run %v: mallory = %v, status %d, headers %v; want blocked, 403, none", dry, v.Outcome, v.Status(), headers(&v))
		}
		status, body := v.Answer(func(string, string) {})
		if status != 403 || string(body) != "forbidden: blocked\n" {
			t.Errorf("answer = %d %q", status, body)
		}
		if d, _ := l.Peek(ctx, "mallory"); d.Remaining != 1 {
			t.Errorf("a blocked request took units: %+v", d)
		}
		if v := g.Admit(ctx, req().with("X-User", "alice")); v.Outcome != guard.OutcomeSkip {
			t.Errorf("alice = %v, want skip", v.Outcome)
		}
	}
	if n := obs.Count(guard.EventBlock); n != 2 {
		t.Errorf("observer saw %d blocks, want 2", n)
	}
}

// TestEventKindNames: the middleware's event kinds are named by
// core.EventKind.String, as metrics and logs label them.
func TestEventKindNames(t *testing.T) {
	for k, want := range map[core.EventKind]string{guard.EventSkip: "skip", guard.EventKeyError: "key_error", guard.EventDryRun: "dry_run", guard.EventBlock: "block"} {
		if got := k.String(); got != want {
			t.Errorf("EventKind(%d).String() = %q, want %q", k, got, want)
		}
	}
}
