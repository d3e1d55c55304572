package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/grpclimit"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/keyfunc"
)

func TestUnaryDeny(t *testing.T) {
	t.Parallel()
	const limit = 3
	tests := []struct {
		name   string
		style  *guard.HeaderStyle // nil: default
		want   []string           // metadata on every decided call
		absent []string           // metadata never sent
	}{
		{
			name:   "default x-ratelimit",
			want:   []string{"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"},
			absent: []string{"ratelimit-policy", "ratelimit"},
		},
		{
			name:   "ietf",
			style:  ptr(guard.HeadersIETF),
			want:   []string{"ratelimit-policy", "ratelimit"},
			absent: []string{"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"},
		},
		{
			name:  "both",
			style: ptr(guard.HeadersXRateLimit | guard.HeadersIETF),
			want:  []string{"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "ratelimit-policy", "ratelimit"},
		},
		{
			name:   "none",
			style:  ptr(guard.HeadersNone),
			absent: []string{"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "ratelimit-policy", "ratelimit"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			opts := []guard.Option{guard.WithKey(userKey)}
			if tc.style != nil {
				opts = append(opts, guard.WithHeaders(*tc.style))
			}
			l := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("api", testkit.PerMinute(limit)))
			c := serveBufconn(t, grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(l, opts...)))
			const user = "alice-secret-key"

			start := time.Now()
			for i := range limit {
				md, err := callEmpty(c, user)
				if err != nil {
					t.Fatalf("call %d: EmptyCall = %v, want OK", i+1, err)
				}
				checkMD(t, fmt.Sprintf("call %d", i+1), md, tc.want, tc.absent)
				if tc.style == nil {
					if got, want := md.Get("x-ratelimit-limit"), []string{strconv.Itoa(limit)}; !slices.Equal(got, want) {
						t.Errorf("call %d: x-ratelimit-limit = %q, want %q", i+1, got, want)
					}
					if got, want := md.Get("x-ratelimit-remaining"), []string{strconv.Itoa(limit - 1 - i)}; !slices.Equal(got, want) {
						t.Errorf("call %d: x-ratelimit-remaining = %q, want %q", i+1, got, want)
					}
				}
				if got := md.Get("retry-after"); got != nil {
					t.Errorf("call %d: allowed call has retry-after %q", i+1, got)
				}
			}

			md, err := callEmpty(c, user)
			elapsed := time.Since(start)
			st := status.Convert(err)
			if st.Code() != codes.ResourceExhausted || st.Message() != "rate limit exceeded" {
				t.Fatalf("call %d: EmptyCall = %v, want ResourceExhausted \"rate limit exceeded\"", limit+1, err)
			}
			checkMD(t, "denied call", md, tc.want, tc.absent)
			ri, qf := details(err)
			if ri == nil || qf == nil {
				t.Fatalf("denied call: details RetryInfo=%v QuotaFailure=%v, want both", ri, qf)
			}
			// The first unit leaves the window one minute after it was
			// admitted, which was between start and start+elapsed.
			delay := ri.GetRetryDelay().AsDuration()
			if lo, hi := time.Minute-elapsed-time.Second, time.Minute+time.Second; delay < lo || delay > hi {
				t.Errorf("RetryInfo delay = %v, want within 1s of [%v, %v]", delay, time.Minute-elapsed, time.Minute)
			}
			wantRetry := strconv.FormatInt(max(1, guard.Seconds(delay)), 10)
			if got := md.Get("retry-after"); !slices.Equal(got, []string{wantRetry}) {
				t.Errorf("denied call: retry-after = %q, want [%s] (from RetryInfo %v)", got, wantRetry, delay)
			}
			if len(qf.GetViolations()) != 1 {
				t.Fatalf("QuotaFailure violations = %v, want 1", qf.GetViolations())
			}
			if v := qf.GetViolations()[0]; v.GetSubject() != "api" || v.GetDescription() != "limit 3 per 1m0s" {
				t.Errorf("QuotaFailure violation = {%q, %q}, want {\"api\", \"limit 3 per 1m0s\"}", v.GetSubject(), v.GetDescription())
			}
			// The key must not reach the client.
			leak := fmt.Sprint(st.Proto(), md)
			if strings.Contains(leak, user) {
				t.Errorf("denied call leaks the key: %s", leak)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// checkMD checks that md holds every name in want and none in absent.
func checkMD(t *testing.T, what string, md metadata.MD, want, absent []string) {
	t.Helper()
	for _, k := range want {
		if len(md.Get(k)) != 1 {
			t.Errorf("%s: metadata %s = %q, want one value (metadata %v)", what, k, md.Get(k), md)
		}
	}
	for _, k := range absent {
		if md.Get(k) != nil {
			t.Errorf("%s: metadata %s = %q, want none", what, k, md.Get(k))
		}
	}
}

// TestQuotaFailureConcurrentDenials: the QuotaFailure of a denial by one
// rule of the guard's own policy is built once and shared by every
// denial; concurrent denials (marshalling it at once) each carry it whole.
// Two rules violated at once are both named.
func TestQuotaFailureConcurrentDenials(t *testing.T) {
	t.Parallel()
	l := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "sms", Rules: []core.Rule{{Limit: 1, Window: time.Minute}, {Limit: 5, Window: time.Hour}}})
	c := serveBufconn(t, grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(l, guard.WithKey(userKey))))
	if _, err := callEmpty(c, "u"); err != nil {
		t.Fatalf("call 1: EmptyCall = %v, want OK", err)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				_, err := callEmpty(c, "u")
				got := violations(err)
				if want := []string{"sms: limit 1 per 1m0s"}; status.Code(err) != codes.ResourceExhausted || !slices.Equal(got, want) {
					t.Errorf("goroutine %d call %d: EmptyCall = %v, violations %q, want ResourceExhausted with %q", g, i, err, got, want)
					return
				}
			}
		}()
	}
	wg.Wait()

	both := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "pair", Rules: []core.Rule{{Limit: 1, Window: time.Minute}, {Limit: 1, Window: time.Hour}}})
	c = serveBufconn(t, grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(both, guard.WithKey(userKey))))
	if _, err := callEmpty(c, "u"); err != nil {
		t.Fatalf("pair call 1: EmptyCall = %v, want OK", err)
	}
	_, err := callEmpty(c, "u") // decided by the store: both rules full
	got := violations(err)
	if want := []string{"pair: limit 1 per 1m0s", "pair: limit 1 per 1h0m0s"}; !slices.Equal(got, want) {
		t.Errorf("pair call 2: QuotaFailure violations = %q, want %q", got, want)
	}
}

func TestMultiRuleQuotaFailure(t *testing.T) {
	t.Parallel()
	l := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "sms", Rules: []core.Rule{{Limit: 1, Window: time.Minute}, {Limit: 5, Window: time.Hour}}})
	c := serveBufconn(t, grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(l, guard.WithKey(userKey))))
	if _, err := callEmpty(c, "u"); err != nil {
		t.Fatalf("call 1: EmptyCall = %v, want OK", err)
	}
	// Call 2 is denied by the store, call 3 from the deny cache, which
	// knows only the binding rule: both name the violated rule.
	for call := 2; call <= 3; call++ {
		_, err := callEmpty(c, "u")
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("call %d: EmptyCall = %v, want ResourceExhausted", call, err)
		}
		ri, _ := details(err)
		got := violations(err)
		if want := []string{"sms: limit 1 per 1m0s"}; !slices.Equal(got, want) {
			t.Errorf("call %d: QuotaFailure violations = %q, want %q (only the violated rule)", call, got, want)
		}
		if d := ri.GetRetryDelay().AsDuration(); d <= 0 || d > time.Minute {
			t.Errorf("call %d: RetryInfo delay = %v, want within (0, 1m]", call, d)
		}
	}
}

func TestStreamInterceptor(t *testing.T) {
	t.Parallel()
	const limit, messages = 2, 3
	l := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("streams", testkit.PerMinute(limit)))
	c := serveBufconn(t, grpc.StreamInterceptor(grpclimit.StreamServerInterceptor(l, guard.WithKey(userKey))))

	// Each stream is charged once when it opens, whatever it carries.
	for i := range limit {
		md, got, err := openStream(c, "u", messages)
		if err != nil || got != messages {
			t.Fatalf("stream %d: got %d messages, err %v; want %d, nil", i+1, got, err, messages)
		}
		if got, want := md.Get("x-ratelimit-remaining"), []string{strconv.Itoa(limit - 1 - i)}; !slices.Equal(got, want) {
			t.Errorf("stream %d: x-ratelimit-remaining = %q, want %q", i+1, got, want)
		}
	}
	md, got, err := openStream(c, "u", messages)
	if status.Code(err) != codes.ResourceExhausted || got != 0 {
		t.Fatalf("stream %d: got %d messages, err %v; want 0, ResourceExhausted on first Recv", limit+1, got, err)
	}
	if ri, qf := details(err); ri == nil || qf == nil {
		t.Errorf("denied stream: details RetryInfo=%v QuotaFailure=%v, want both", ri, qf)
	}
	if md.Get("retry-after") == nil || md.Get("x-ratelimit-remaining") == nil {
		t.Errorf("denied stream: header metadata %v, want retry-after and x-ratelimit-*", md)
	}
	// Another user has a bucket of its own.
	if _, _, err := openStream(c, "v", 1); err != nil {
		t.Errorf("stream by another user = %v, want OK", err)
	}
}

func TestWithMethods(t *testing.T) {
	t.Parallel()
	l := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("empty-only", testkit.PerMinute(1)))
	opts := []guard.Option{guard.WithKey(userKey), grpclimit.WithMethods(emptyCall)}
	c := serveBufconn(t,
		grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(l, opts...)),
		grpc.StreamInterceptor(grpclimit.StreamServerInterceptor(l, opts...)),
	)
	for i := range 3 {
		md, err := callUnary(c, "u", codes.OK)
		if err != nil {
			t.Fatalf("UnaryCall %d = %v, want OK (not limited)", i+1, err)
		}
		if md.Get("x-ratelimit-limit") != nil {
			t.Errorf("UnaryCall %d: metadata %v, want no rate-limit metadata", i+1, md)
		}
		if _, _, err := openStream(c, "u", 1); err != nil {
			t.Fatalf("stream %d = %v, want OK (not limited)", i+1, err)
		}
	}
	if _, err := callEmpty(c, "u"); err != nil {
		t.Fatalf("EmptyCall 1 = %v, want OK", err)
	}
	if _, err := callEmpty(c, "u"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("EmptyCall 2 = %v, want ResourceExhausted", err)
	}
}

func TestRouter(t *testing.T) {
	t.Parallel()
	def := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("default", testkit.PerMinute(1)))
	shared := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("shared", testkit.PerMinute(2)))
	r := grpclimit.NewRouter(def, map[string]*core.Limiter{
		emptyCall:     shared,
		cacheableCall: shared, // counts together with EmptyCall
		unaryCall:     nil,    // exempt from the default
	}, guard.WithKey(userKey))
	c := serveBufconn(t,
		grpc.UnaryInterceptor(r.UnaryServerInterceptor()),
		grpc.StreamInterceptor(r.StreamServerInterceptor()),
	)
	cacheable := func(c testpbClient, user string) (metadata.MD, error) {
		var hdr metadata.MD
		_, err := c.CacheableUnaryCall(withUser(user), simpleRequest(), grpc.Header(&hdr))
		return hdr, err
	}
	unary := func(c testpbClient, user string) (metadata.MD, error) { return callUnary(c, user, codes.OK) }
	stream := func(c testpbClient, user string) (metadata.MD, error) {
		md, _, err := openStream(c, user, 1)
		return md, err
	}
	steps := []struct {
		name   string
		call   func(testpbClient, string) (metadata.MD, error)
		want   codes.Code
		policy string // subject of the QuotaFailure when denied
	}{
		{"empty 1", callEmpty, codes.OK, ""},
		{"cacheable 1 (shared limiter)", cacheable, codes.OK, ""},
		{"empty 2", callEmpty, codes.ResourceExhausted, "shared"},
		{"cacheable 2", cacheable, codes.ResourceExhausted, "shared"},
		{"unary 1 (exempt)", unary, codes.OK, ""},
		{"unary 2 (exempt)", unary, codes.OK, ""},
		{"unary 3 (exempt)", unary, codes.OK, ""},
		{"stream 1 (default)", stream, codes.OK, ""},
		{"stream 2 (default)", stream, codes.ResourceExhausted, "default"},
	}
	for _, s := range steps {
		md, err := s.call(c, "u")
		if got := status.Code(err); got != s.want {
			t.Fatalf("%s: code %v (err %v), want %v", s.name, got, err, s.want)
		}
		if s.want != codes.OK {
			_, qf := details(err)
			if v := qf.GetViolations(); len(v) != 1 || v[0].GetSubject() != s.policy {
				t.Errorf("%s: QuotaFailure %v, want subject %q", s.name, v, s.policy)
			}
		}
		if strings.HasPrefix(s.name, "unary") && md.Get("x-ratelimit-limit") != nil {
			t.Errorf("%s: exempt call has rate-limit metadata %v", s.name, md)
		}
	}
}

func TestRouterWithMethods(t *testing.T) {
	t.Parallel()
	def := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("default", testkit.PerMinute(1)))
	r := grpclimit.NewRouter(def, nil, guard.WithKey(userKey), grpclimit.WithMethods(emptyCall))
	c := serveBufconn(t, grpc.UnaryInterceptor(r.UnaryServerInterceptor()))
	for i := range 3 {
		if _, err := callUnary(c, "u", codes.OK); err != nil {
			t.Fatalf("UnaryCall %d = %v, want OK (not in WithMethods)", i+1, err)
		}
	}
	if _, err := callEmpty(c, "u"); err != nil {
		t.Fatalf("EmptyCall 1 = %v, want OK", err)
	}
	if _, err := callEmpty(c, "u"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("EmptyCall 2 = %v, want ResourceExhausted", err)
	}
}

func TestKeys(t *testing.T) {
	t.Parallel()
	badKey := func(r keyfunc.Request) (string, error) {
		return "", fmt.Errorf("ratekit: keyfunc: x-user %q: secret detail: %w", r.Header("x-user"), keyfunc.ErrInvalidKey)
	}
	type step struct {
		user   string
		want   codes.Code
		header bool // rate-limit metadata expected
	}
	tests := []struct {
		name  string
		opts  []guard.Option
		steps []step
	}{
		{
			name: "metadata key, one bucket per user",
			opts: []guard.Option{guard.WithKey(userKey)},
			steps: []step{
				{"alice", codes.OK, true},
				{"alice", codes.OK, true},
				{"alice", codes.ResourceExhausted, true},
				{"bob", codes.OK, true},
			},
		},
		{
			name: "missing key skips by default",
			opts: []guard.Option{guard.WithKey(userKey)},
			steps: []step{
				{"", codes.OK, false}, {"", codes.OK, false}, {"", codes.OK, false}, {"", codes.OK, false},
			},
		},
		{
			name: "missing key shared",
			opts: []guard.Option{guard.WithKey(userKey), guard.WithNoKey(guard.NoKeyShared)},
			steps: []step{
				{"", codes.OK, true}, {"", codes.OK, true}, {"", codes.ResourceExhausted, true}, {"alice", codes.OK, true},
			},
		},
		{
			name:  "missing key rejected",
			opts:  []guard.Option{guard.WithKey(userKey), guard.WithNoKey(guard.NoKeyReject)},
			steps: []step{{"", codes.InvalidArgument, false}, {"alice", codes.OK, true}},
		},
		{
			name:  "bad key",
			opts:  []guard.Option{guard.WithKey(badKey)},
			steps: []step{{"mallory", codes.InvalidArgument, false}},
		},
		{
			name:  "bad key skipped",
			opts:  []guard.Option{guard.WithKey(badKey), guard.WithKeyError(guard.KeyErrorSkip)},
			steps: []step{{"mallory", codes.OK, false}, {"mallory", codes.OK, false}, {"mallory", codes.OK, false}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("keys", testkit.PerMinute(2)))
			c := serveBufconn(t, grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(l, tc.opts...)))
			for i, s := range tc.steps {
				md, err := callEmpty(c, s.user)
				if got := status.Code(err); got != s.want {
					t.Fatalf("step %d: EmptyCall(user %q) = %v, want %v", i+1, s.user, err, s.want)
				}
				if got := md.Get("x-ratelimit-limit") != nil; got != s.header {
					t.Errorf("step %d: rate-limit metadata present = %v, want %v (%v)", i+1, got, s.header, md)
				}
				if s.want == codes.InvalidArgument {
					if msg := status.Convert(err).Message(); msg != "missing or malformed rate-limit key" {
						t.Errorf("step %d: message %q, want the fixed text", i+1, msg)
					}
				}
			}
		})
	}
}

func TestFailurePolicy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		policy core.FailurePolicy
		want   []codes.Code
	}{
		{core.FailClosed, []codes.Code{codes.Unavailable, codes.Unavailable}},
		{core.FailOpen, []codes.Code{codes.OK, codes.OK, codes.OK}},
		{core.FailLocal, []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted}},
	}
	for _, tc := range tests {
		t.Run(tc.policy.String(), func(t *testing.T) {
			t.Parallel()
			obs := &testkit.Events{}
			l := testkit.Limiter(t, testkit.FailingStore{Err: errStoreDown}, testkit.Policy("fail", testkit.PerMinute(2)), core.WithFailurePolicy(tc.policy), core.WithObserver(obs))
			opts := []guard.Option{guard.WithKey(userKey)}
			c := serveBufconn(t,
				grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(l, opts...)),
				grpc.StreamInterceptor(grpclimit.StreamServerInterceptor(l, opts...)),
			)
			for i, want := range tc.want {
				_, err := callEmpty(c, "u")
				if got := status.Code(err); got != want {
					t.Fatalf("call %d: EmptyCall = %v, want %v", i+1, err, want)
				}
				if msg := status.Convert(err).Message(); strings.Contains(msg, "secret") {
					t.Errorf("call %d: message %q leaks the store error", i+1, msg)
				}
				if want == codes.Unavailable && status.Convert(err).Message() != "rate limiter unavailable" {
					t.Errorf("call %d: message %q, want the fixed text", i+1, status.Convert(err).Message())
				}
			}
			if tc.policy == core.FailClosed {
				if _, _, err := openStream(c, "u", 1); status.Code(err) != codes.Unavailable {
					t.Errorf("stream = %v, want Unavailable", err)
				}
			}
			if obs.Count(core.EventStoreError) == 0 {
				t.Errorf("observer saw no store error")
			}
		})
	}
}

func TestDryRun(t *testing.T) {
	t.Parallel()
	obs := &testkit.Events{}
	l := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("dry", testkit.PerMinute(1)))
	c := serveBufconn(t, grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(l,
		guard.WithKey(userKey), guard.WithDryRun(true), guard.WithObserver(obs))))
	for i := range 3 {
		md, err := callEmpty(c, "u")
		if err != nil {
			t.Fatalf("call %d: EmptyCall = %v, want OK in dry-run", i+1, err)
		}
		if i > 0 && md.Get("retry-after") != nil {
			t.Errorf("call %d: dry-run denial sent retry-after", i+1)
		}
	}
	if dry := obs.Count(guard.EventDryRun); dry != 2 {
		t.Errorf("observer saw %d dry-run denials, want 2", dry)
	}
}

func TestCountIf(t *testing.T) {
	t.Parallel()
	failures := func(c codes.Code) bool { return c == codes.Unauthenticated }
	type step struct {
		answer codes.Code // what the handler answers
		want   codes.Code // what the client sees
	}
	tests := []struct {
		name  string
		opts  []guard.Option
		steps []step
	}{
		{
			name: "count failures only",
			opts: []guard.Option{grpclimit.WithCountIf(failures)},
			steps: []step{
				{codes.OK, codes.OK}, {codes.OK, codes.OK}, {codes.OK, codes.OK}, {codes.OK, codes.OK},
				{codes.Unauthenticated, codes.Unauthenticated},
				{codes.OK, codes.OK},
				{codes.Unauthenticated, codes.Unauthenticated},
				{codes.OK, codes.ResourceExhausted},
			},
		},
		{
			name: "reset on success",
			opts: []guard.Option{grpclimit.WithCountIf(failures), grpclimit.WithResetIf(func(c codes.Code) bool { return c == codes.OK })},
			steps: []step{
				{codes.Unauthenticated, codes.Unauthenticated},
				{codes.OK, codes.OK}, // forgets the failure
				{codes.Unauthenticated, codes.Unauthenticated},
				{codes.Unauthenticated, codes.Unauthenticated},
				{codes.OK, codes.ResourceExhausted},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("login", testkit.PerMinute(2)))
			opts := append([]guard.Option{guard.WithKey(userKey)}, tc.opts...)
			c := serveBufconn(t, grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(l, opts...)))
			for i, s := range tc.steps {
				if _, err := callUnary(c, "u", s.answer); status.Code(err) != s.want {
					t.Fatalf("step %d: UnaryCall answering %v = %v, want %v", i+1, s.answer, err, s.want)
				}
			}
		})
	}

	t.Run("stream", func(t *testing.T) {
		t.Parallel()
		l := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("login-stream", testkit.PerMinute(1)))
		c := serveBufconn(t, grpc.StreamInterceptor(grpclimit.StreamServerInterceptor(l,
			guard.WithKey(userKey), grpclimit.WithCountIf(func(c codes.Code) bool { return c != codes.OK }))))
		for i := range 3 {
			if _, _, err := openStream(c, "u", 2); err != nil {
				t.Fatalf("stream %d = %v, want OK (successful streams are refunded)", i+1, err)
			}
		}
	})
}

func TestSkipAndCost(t *testing.T) {
	t.Parallel()
	l := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("cost", testkit.PerMinute(4)))
	c := serveBufconn(t, grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(l,
		guard.WithKey(userKey),
		guard.WithSkip(func(r keyfunc.Request) bool { return r.Route() == unaryCall }),
		guard.WithCost(func(keyfunc.Request) int64 { return 2 }),
	)))
	for i := range 5 {
		if _, err := callUnary(c, "u", codes.OK); err != nil {
			t.Fatalf("UnaryCall %d = %v, want OK (skipped)", i+1, err)
		}
	}
	for i, want := range []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted} {
		md, err := callEmpty(c, "u")
		if got := status.Code(err); got != want {
			t.Fatalf("EmptyCall %d = %v, want %v", i+1, err, want)
		}
		if want == codes.OK {
			if got, want := md.Get("x-ratelimit-remaining"), []string{strconv.Itoa(2 - 2*i)}; !slices.Equal(got, want) {
				t.Errorf("EmptyCall %d: x-ratelimit-remaining = %q, want %q (cost 2)", i+1, got, want)
			}
		}
	}
}

func TestDenyHandler(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		handler  func(context.Context, *guard.Verdict) error
		wantCode codes.Code
		wantMsg  string
	}{
		{
			name: "custom status",
			handler: func(_ context.Context, v *guard.Verdict) error {
				return status.Errorf(codes.Unavailable, "slow down, retry in %v", v.Decision.RetryAfter.Round(time.Minute))
			},
			wantCode: codes.Unavailable,
			wantMsg:  "slow down, retry in 1m0s",
		},
		{
			name:     "nil keeps the default",
			handler:  func(context.Context, *guard.Verdict) error { return nil },
			wantCode: codes.ResourceExhausted,
			wantMsg:  "rate limit exceeded",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("deny", testkit.PerMinute(1)))
			c := serveBufconn(t, grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(l,
				guard.WithKey(userKey), grpclimit.WithDenyHandler(tc.handler))))
			if _, err := callEmpty(c, "u"); err != nil {
				t.Fatalf("call 1: EmptyCall = %v, want OK", err)
			}
			md, err := callEmpty(c, "u")
			if st := status.Convert(err); st.Code() != tc.wantCode || st.Message() != tc.wantMsg {
				t.Fatalf("call 2: EmptyCall = %v, want %v %q", err, tc.wantCode, tc.wantMsg)
			}
			if md.Get("retry-after") == nil {
				t.Errorf("call 2: metadata %v, want retry-after set before the deny handler", md)
			}
		})
	}
}

func TestDenyHandlerOnlyForDenials(t *testing.T) {
	t.Parallel()
	l := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("deny-only", testkit.PerMinute(1)))
	called := make(chan guard.Outcome, 1)
	c := serveBufconn(t, grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(l,
		guard.WithKey(userKey), guard.WithNoKey(guard.NoKeyReject),
		grpclimit.WithDenyHandler(func(_ context.Context, v *guard.Verdict) error {
			called <- v.Outcome
			return status.Error(codes.PermissionDenied, "custom")
		}))))
	if _, err := callEmpty(c, ""); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("anonymous call = %v, want InvalidArgument (not the deny handler's)", err)
	}
	select {
	case o := <-called:
		t.Errorf("deny handler called for outcome %v", o)
	default:
	}
}

// TestTCPClientIP runs over a real loopback connection, keyed by the
// default key function: the client IP.
func TestTCPClientIP(t *testing.T) {
	t.Parallel()
	var (
		mu      sync.Mutex
		keys    []string
		remotes []string
	)
	obs := core.ObserverFunc(func(_ context.Context, e core.Event) {
		if e.Kind == core.EventDecision {
			mu.Lock()
			keys = append(keys, e.Key)
			mu.Unlock()
		}
	})
	spy := func(r keyfunc.Request) bool {
		mu.Lock()
		remotes = append(remotes, r.RemoteAddr())
		mu.Unlock()
		return false
	}
	l := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("ip", testkit.PerMinute(2)), core.WithObserver(obs))
	c := serveTCP(t, grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(l, guard.WithSkip(spy))))
	for i, want := range []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted} {
		if _, err := callEmpty(c, ""); status.Code(err) != want {
			t.Fatalf("call %d: EmptyCall = %v, want %v", i+1, err, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(keys) != 3 || len(remotes) != 3 {
		t.Fatalf("saw keys %q and remote addresses %q, want 3 of each", keys, remotes)
	}
	for i := range keys {
		if host, _, err := net.SplitHostPort(remotes[i]); err != nil || host != "127.0.0.1" {
			t.Errorf("call %d: RemoteAddr() = %q, want 127.0.0.1:port", i+1, remotes[i])
		}
		// keyfunc.ClientIP keys by the IP; tolerate a port in case it
		// keeps one.
		host := keys[i]
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if host != "127.0.0.1" {
			t.Errorf("call %d: key %q, want 127.0.0.1", i+1, keys[i])
		}
	}
}

func TestRequest(t *testing.T) {
	t.Parallel()
	type ctxKey struct{}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(
		"x-api-key", "k1", "x-forwarded-for", "203.0.113.1", "x-forwarded-for", "10.0.0.1"))
	ctx = peer.NewContext(ctx, &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 4242}})
	ctx = context.WithValue(ctx, ctxKey{}, "user-7")
	r := grpclimit.Request(ctx, "/auth.v1.Auth/Login")

	for _, c := range []struct{ name, got, want string }{
		{"Method()", r.Method(), "POST"},
		{"Route()", r.Route(), "/auth.v1.Auth/Login"},
		{"Path()", r.Path(), "/auth.v1.Auth/Login"},
		{`Header("X-Api-Key")`, r.Header("X-Api-Key"), "k1"},
		{`Header("x-api-key")`, r.Header("x-api-key"), "k1"},
		{`Header("missing")`, r.Header("missing"), ""},
		{`Query("x-api-key")`, r.Query("x-api-key"), ""},
		{"RemoteAddr()", r.RemoteAddr(), "192.0.2.7:4242"},
		{"Value(ctxKey{})", fmt.Sprint(r.Value(ctxKey{})), "user-7"},
	} {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.name, c.got, c.want)
		}
	}
	if got, want := r.Values("X-Forwarded-For"), []string{"203.0.113.1", "10.0.0.1"}; !slices.Equal(got, want) {
		t.Errorf("Values(X-Forwarded-For) = %q, want %q", got, want)
	}
	if r.Context() != ctx {
		t.Errorf("Context() is not the call's context")
	}
	if b, err := r.Body(1024); b != nil || !errors.Is(err, keyfunc.ErrNoKey) {
		t.Errorf("Body(1024) = %q, %v; want nil, an error wrapping keyfunc.ErrNoKey", b, err)
	}

	bare := grpclimit.Request(context.Background(), "/s/M")
	if bare.RemoteAddr() != "" || bare.Header("x") != "" || bare.Values("x") != nil {
		t.Errorf("view of a bare context: RemoteAddr %q, Header %q, Values %q; want empty", bare.RemoteAddr(), bare.Header("x"), bare.Values("x"))
	}
}

// TestOutsideServer calls the interceptors directly, without a gRPC server
// (so SetHeader fails): they must neither panic nor fail the call.
func TestOutsideServer(t *testing.T) {
	t.Parallel()
	l := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("direct", testkit.PerMinute(1)))
	key := guard.WithKey(func(keyfunc.Request) (string, error) { return "k", nil })
	unary := grpclimit.UnaryServerInterceptor(l, key)
	info := &grpc.UnaryServerInfo{FullMethod: emptyCall}
	calls := 0
	handler := func(context.Context, any) (any, error) { calls++; return "ok", nil }

	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()

	tests := []struct {
		name string
		ctx  context.Context
		want codes.Code
	}{
		{"allowed", context.Background(), codes.OK},
		{"denied", context.Background(), codes.ResourceExhausted},
		{"canceled before the decision", canceled, codes.Canceled},
		{"deadline before the decision", expired, codes.DeadlineExceeded},
	}
	for _, tc := range tests {
		calls = 0
		resp, err := unary(tc.ctx, nil, info, handler)
		if got := status.Code(err); got != tc.want {
			t.Fatalf("%s: interceptor = %v, %v; want %v", tc.name, resp, err, tc.want)
		}
		if wantCalls := map[bool]int{true: 1, false: 0}[tc.want == codes.OK]; calls != wantCalls {
			t.Errorf("%s: handler called %d times, want %d", tc.name, calls, wantCalls)
		}
	}

	stream := grpclimit.StreamServerInterceptor(l, key)
	err := stream(nil, fakeStream{ctx: canceled}, &grpc.StreamServerInfo{FullMethod: streamingCall},
		func(any, grpc.ServerStream) error { t.Error("stream handler called"); return nil })
	if status.Code(err) != codes.Canceled {
		t.Errorf("stream interceptor on a canceled stream = %v, want Canceled", err)
	}
}

type fakeStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s fakeStream) Context() context.Context     { return s.ctx }
func (s fakeStream) SetHeader(metadata.MD) error  { return nil }
func (s fakeStream) SendHeader(metadata.MD) error { return nil }
func (s fakeStream) SetTrailer(metadata.MD)       {}
func (s fakeStream) SendMsg(any) error            { return nil }
func (s fakeStream) RecvMsg(any) error            { return nil }

func TestPanics(t *testing.T) {
	t.Parallel()
	l := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("p", testkit.PerMinute(1)))
	tests := []struct {
		name string
		f    func()
	}{
		{"UnaryServerInterceptor(nil)", func() { grpclimit.UnaryServerInterceptor(nil) }},
		{"StreamServerInterceptor(nil)", func() { grpclimit.StreamServerInterceptor(nil) }},
		{"NewRouter without limiters", func() { grpclimit.NewRouter(nil, map[string]*core.Limiter{emptyCall: nil}) }},
		{"NewRouter bad route", func() { grpclimit.NewRouter(l, map[string]*core.Limiter{"EmptyCall": l}) }},
		{`WithMethods("Login")`, func() { grpclimit.WithMethods("Login") }},
		{`WithMethods("/svc/")`, func() { grpclimit.WithMethods("/svc/") }},
		{`WithMethods("svc/M")`, func() { grpclimit.WithMethods("svc/M") }},
		{`WithMethods("/a/b/c")`, func() { grpclimit.WithMethods("/a/b/c") }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("%s did not panic", tc.name)
				}
			}()
			tc.f()
		})
	}
	// A well-formed call does not panic.
	grpclimit.WithMethods("/grpc.health.v1.Health/Check", emptyCall)
}

func TestWithAlso(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	main := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("api", testkit.PerMinute(5)))
	tenant := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("tenant", testkit.PerMinute(1)))
	c := serveBufconn(t, grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(main,
		guard.WithKey(userKey), guard.WithAlso(tenant, userKey))))
	if _, err := callEmpty(c, "u"); err != nil {
		t.Fatalf("call 1: EmptyCall = %v, want OK", err)
	}
	for i := 2; i <= 4; i++ {
		md, err := callEmpty(c, "u")
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("call %d: EmptyCall = %v, want ResourceExhausted from the added limit", i, err)
		}
		if got := md.Get("x-ratelimit-limit"); !slices.Equal(got, []string{"1"}) {
			t.Errorf("call %d: x-ratelimit-limit = %q, want the added limit's [1]", i, got)
		}
		_, qf := details(err)
		if v := qf.GetViolations(); len(v) != 1 || v[0].GetSubject() != "tenant" || v[0].GetDescription() != "limit 1 per 1m0s" {
			t.Errorf("call %d: QuotaFailure violations = %v, want one of subject \"tenant\", \"limit 1 per 1m0s\"", i, v)
		}
		d, err := main.Peek(ctx, "u")
		if err != nil || d.Remaining != 4 {
			t.Errorf("call %d: main Peek = %+v, %v; want 4 remaining: the denied call consumed nothing", i, d, err)
		}
	}
}

// TestStackedIETF: two interceptors on one call (per user outside, a
// global cap inside) and a limit added with WithAlso: the IETF fields
// list every limit that applies, none erased by another, for unary
// calls and streams.
func TestStackedIETF(t *testing.T) {
	ietf := guard.WithHeaders(guard.HeadersIETF)
	everyone := func(keyfunc.Request) (string, error) { return "all", nil }
	perUser := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("per-user", testkit.PerMinute(5)))
	global := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("global", testkit.PerMinute(50)))
	tenant := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("tenant", testkit.PerMinute(20)))
	c := serveBufconn(t,
		grpc.ChainUnaryInterceptor(
			grpclimit.UnaryServerInterceptor(perUser, guard.WithKey(userKey), ietf),
			grpclimit.UnaryServerInterceptor(global, guard.WithKey(everyone), guard.WithAlso(tenant, everyone), ietf)),
		grpc.ChainStreamInterceptor(
			grpclimit.StreamServerInterceptor(perUser, guard.WithKey(userKey), ietf),
			grpclimit.StreamServerInterceptor(global, guard.WithKey(everyone), guard.WithAlso(tenant, everyone), ietf)))
	names := func(md metadata.MD, key string) []string {
		var out []string
		for _, v := range md.Get(key) {
			for _, item := range strings.Split(v, ", ") {
				name, _, _ := strings.Cut(item, ";")
				out = append(out, name)
			}
		}
		return out
	}
	want := []string{`"per-user"`, `"global"`, `"tenant"`}
	hdr, err := callEmpty(c, "alice")
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"ratelimit-policy", "ratelimit"} {
		if got := names(hdr, key); !slices.Equal(got, want) {
			t.Errorf("unary call: %s items %v, want %v (%q)", key, got, want, hdr.Get(key))
		}
	}
	hdr, _, err = openStream(c, "alice", 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"ratelimit-policy", "ratelimit"} {
		if got := names(hdr, key); !slices.Equal(got, want) {
			t.Errorf("stream: %s items %v, want %v (%q)", key, got, want, hdr.Get(key))
		}
	}
}
