package ratekittest_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/nethttp"
	"github.com/ratekit/ratekit/ratekittest"
)

func TestClock(t *testing.T) {
	c := ratekittest.NewClock()
	start := time.Date(2029, time.January, 1, 0, 0, 0, 0, time.UTC)
	if got := c.Now(); !got.Equal(start) || got.Weekday() != time.Monday {
		t.Fatalf("NewClock().Now() = %v (%v), want %v, a Monday", got, got.Weekday(), start)
	}
	if got := c.Now(); !got.Equal(c.Now()) {
		t.Fatalf("Now() moved by itself: %v, then %v", got, c.Now())
	}
	c.Advance(90 * time.Second)
	if got, want := c.Now(), start.Add(90*time.Second); !got.Equal(want) {
		t.Errorf("after Advance(90s): Now() = %v, want %v", got, want)
	}
	c.Advance(-30 * time.Second)
	if got, want := c.Now(), start.Add(time.Minute); !got.Equal(want) {
		t.Errorf("after Advance(-30s): Now() = %v, want %v", got, want)
	}
	eve := time.Date(2029, time.March, 31, 23, 59, 0, 0, paris)
	c.Set(eve)
	if got := c.Now(); got != eve || got.Location() != paris {
		t.Errorf("after Set(%v): Now() = %v in %v, want %v in %v", eve, got, got.Location(), eve, paris)
	}
	// A time read from the process's clock is set without its monotonic
	// reading: the clock's time is its wall time, as the store reads it.
	wall := time.Now()
	c.Set(wall)
	if got := c.Now(); got != wall.Round(0) {
		t.Errorf("after Set(time.Now()): Now() = %#v, want %#v", got, wall.Round(0))
	}
}

// TestClockConcurrent moves and reads one clock from several goroutines
// (run with -race): each Advance counts once.
func TestClockConcurrent(t *testing.T) {
	c := ratekittest.NewClock()
	start := c.Now()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				c.Advance(time.Second)
				_ = c.Now()
			}
		})
	}
	wg.Wait()
	if got, want := c.Now().Sub(start), 800*time.Second; got != want {
		t.Errorf("800 concurrent Advance(1s) moved the clock by %v, want %v", got, want)
	}
}

func TestNewStoreNilClock(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "clock is nil") {
			t.Errorf("NewStore(nil) recovered %v, want a panic saying the clock is nil", r)
		}
	}()
	ratekittest.NewStore(nil)
}

// fatalTB is a testing.TB whose Fatalf records the message and ends the
// goroutine, as testing.T's does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestNewLimiterBadPolicy: a policy that cannot work fails the test with
// core.NewLimiter's error, which names the field.
func TestNewLimiterBadPolicy(t *testing.T) {
	for _, tc := range []struct {
		policy core.Policy
		opts   []core.Option
		want   string
	}{
		{core.Policy{Name: "p", Rules: []core.Rule{{Limit: 0, Window: time.Minute}}}, nil, "Rules[0].Limit is 0"},
		{core.Policy{Name: "p", Rules: []core.Rule{{Limit: 5, Window: time.Minute, Challenge: 5}}}, nil, "Rules[0].Challenge"},
		{core.Policy{Name: "p", InFlight: 2, LeaseTTL: time.Millisecond}, nil, "LeaseTTL"},
		{core.Policy{Name: "p", Rules: []core.Rule{{Limit: 1, Window: time.Minute}}}, []core.Option{core.WithTimeout(0)}, "WithTimeout"},
	} {
		tb := &fatalTB{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			ratekittest.NewLimiter(tb, tc.policy, tc.opts...)
		}()
		<-done
		if !strings.HasPrefix(tb.msg, "ratekittest.NewLimiter: ratekit: ") || !strings.Contains(tb.msg, tc.want) {
			t.Errorf("NewLimiter(%+v) failed the test with %q, want the error naming %q", tc.policy, tb.msg, tc.want)
		}
	}
}

// TestStoreHonoursLimiterClock: a limiter with a clock of its own
// (core.WithClock) decides at that clock's time on the kit's store, not at
// the store's.
func TestStoreHonoursLimiterClock(t *testing.T) {
	ctx := context.Background()
	storeClock, own := ratekittest.NewClock(), ratekittest.NewClock()
	l, err := core.NewLimiter(ratekittest.NewStore(storeClock), core.Policy{Name: "own", Rules: []core.Rule{{Limit: 1, Window: time.Minute}}},
		core.WithClock(own.Now))
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := l.Allow(ctx, "k"); !d.Allowed {
		t.Fatalf("first Allow = %+v, want allowed", d)
	}
	storeClock.Advance(time.Hour)
	if d, _ := l.Allow(ctx, "k"); d.Allowed || d.RetryAfter != time.Minute {
		t.Errorf("Allow after the store's clock moved an hour, the limiter's not = Allowed %v RetryAfter %v, want denied, RetryAfter 1m", d.Allowed, d.RetryAfter)
	}
	own.Advance(time.Minute)
	if d, _ := l.Allow(ctx, "k"); !d.Allowed {
		t.Errorf("Allow after the limiter's clock moved a minute = %+v, want allowed", d)
	}
}

// TestTopRefused: the kit's store keeps the refusals Limiter.TopRefused
// reports.
func TestTopRefused(t *testing.T) {
	ctx := context.Background()
	l, _ := ratekittest.NewLimiter(t, core.Policy{Name: "top", Rules: []core.Rule{{Limit: 1, Window: time.Minute}}})
	for _, key := range []string{"a", "b", "b", "b", "c", "c"} {
		if _, err := l.Allow(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	top, err := l.TopRefused(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(top), "[{b 2} {c 1}]"; got != want {
		t.Errorf("TopRefused(10) = %s, want %s", got, want)
	}
}

// get sends a GET / from 192.0.2.1 to h and returns the response.
func get(h http.Handler) *http.Response {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	return rec.Result()
}

var hello = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "hello\n") })

// TestOneLiner runs a one-liner on the kit's clock with guard.WithStore:
// the key used up, the 429 with its exact Retry-After and headers, in
// both header styles, then admitted again once the clock has moved on.
func TestOneLiner(t *testing.T) {
	clock := ratekittest.NewClock()
	h := nethttp.LimitByIP(3, time.Minute, guard.WithStore(ratekittest.NewStore(clock)),
		guard.WithHeaders(guard.HeadersXRateLimit|guard.HeadersIETF))(hello)
	for _, st := range []struct {
		advance time.Duration
		status  int
		// the Retry-After, X-RateLimit-Remaining, X-RateLimit-Reset and
		// RateLimit fields (pk: a hash of the key, 192.0.2.1)
		retry, remaining, reset, ietf string
	}{
		{0, 200, "", "2", "60", `"ip-3-per-1m";r=2;t=60;pk=:nJ+WEqJqfast:`},
		{20 * time.Second, 200, "", "1", "60", `"ip-3-per-1m";r=1;t=40;pk=:nJ+WEqJqfast:`},
		{20 * time.Second, 200, "", "0", "60", `"ip-3-per-1m";r=0;t=20;pk=:nJ+WEqJqfast:`},
		{0, 429, "20", "0", "60", `"ip-3-per-1m";r=0;t=20;pk=:nJ+WEqJqfast:`},
		{19*time.Second + 500*time.Millisecond, 429, "1", "0", "41", `"ip-3-per-1m";r=0;t=1;pk=:nJ+WEqJqfast:`},
		{500 * time.Millisecond, 200, "", "0", "60", `"ip-3-per-1m";r=0;t=20;pk=:nJ+WEqJqfast:`},
		{time.Hour, 200, "", "2", "60", `"ip-3-per-1m";r=2;t=60;pk=:nJ+WEqJqfast:`},
	} {
		clock.Advance(st.advance)
		res := get(h)
		got := fmt.Sprintf("%d retry=%q remaining=%q reset=%q ratelimit=%s", res.StatusCode, res.Header.Get("Retry-After"),
			res.Header.Get("X-RateLimit-Remaining"), res.Header.Get("X-RateLimit-Reset"), res.Header.Get("RateLimit"))
		want := fmt.Sprintf("%d retry=%q remaining=%q reset=%q ratelimit=%s", st.status, st.retry, st.remaining, st.reset, st.ietf)
		if got != want {
			t.Errorf("GET at %v: %s, want %s", clock.Now().Format(time.TimeOnly+".000"), got, want)
		}
	}
}

// TestInFlight is an app's test of a concurrency limit: a request in
// flight holds its slot until the handler returns, the next is refused
// meanwhile with Retry-After: 1, and once the first has ended every slot
// is back. No clock needed: the kit's leases are freed when requests end.
func TestInFlight(t *testing.T) {
	l, _ := ratekittest.NewLimiter(t, core.Policy{Name: "exports", InFlight: 1})
	entered, release := make(chan struct{}), make(chan struct{})
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
	})
	h := nethttp.New(l)(slow)
	first := make(chan *http.Response)
	go func() { first <- get(h) }()
	<-entered
	if res := get(h); res.StatusCode != 429 || res.Header.Get("Retry-After") != "1" {
		t.Errorf("a second request while the first runs: %d Retry-After %q, want 429 Retry-After \"1\"", res.StatusCode, res.Header.Get("Retry-After"))
	}
	close(release)
	if res := <-first; res.StatusCode != 200 {
		t.Errorf("the first request: %d, want 200", res.StatusCode)
	}
	d, err := l.Peek(context.Background(), "192.0.2.1")
	if err != nil || !d.Allowed || d.Remaining != 1 {
		t.Errorf("Peek once the request ended = Allowed %v Remaining %d (%v), want every slot back: Allowed, Remaining 1", d.Allowed, d.Remaining, err)
	}
}

// TestWaitPastDeadline: a wait sleeps on the process's clock, but one
// that would end past its context's deadline fails at once, which is how a
// test on the kit checks that a caller would wait.
func TestWaitPastDeadline(t *testing.T) {
	l, clock := ratekittest.NewLimiter(t, core.Policy{Name: "provider", Rules: []core.Rule{{Limit: 1, Window: time.Minute}}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if d, err := l.Wait(ctx, "partner"); err != nil || !d.Allowed {
		t.Fatalf("first Wait = %+v, %v; want admitted at once", d, err)
	}
	_, err := l.Wait(ctx, "partner")
	if !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		t.Errorf("Wait for a minute under a 10 s deadline = %v (ctx %v), want context.DeadlineExceeded before the deadline", err, ctx.Err())
	}
	clock.Advance(time.Minute)
	if d, err := l.Wait(ctx, "partner"); err != nil || !d.Allowed {
		t.Errorf("Wait a minute later = %+v, %v; want admitted at once", d, err)
	}
}

// TestLoginRefundsAfterOtherResets is an app's test of a login limit that
// counts failed logins only (a malformed request, answered 400, does not
// count) and forgets them after a success, all at one instant of the
// clock: the successes of some accounts, which reset their keys, do not
// make the malformed requests of other accounts count. (On a bare
// MemoryStore under a clock that stands still, they would, for most
// accounts; the kit decides as Redis does.)
func TestLoginRefundsAfterOtherResets(t *testing.T) {
	l, _ := ratekittest.NewLimiter(t, core.Policy{Name: "login", Rules: []core.Rule{{Limit: 3, Window: 15 * time.Minute}},
		Lockout: core.Lockout{For: time.Hour}})
	login := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("X-Password") {
		case "":
			w.WriteHeader(http.StatusBadRequest)
		case "secret":
		default:
			w.WriteHeader(http.StatusUnauthorized)
		}
	})
	h := nethttp.New(l, guard.WithKey(keyfunc.Header("X-Account")),
		guard.WithCountIf(guard.StatusAuthFailure), guard.WithResetIf(guard.StatusSuccess))(login)
	try := func(account, password string) string {
		req := httptest.NewRequest(http.MethodPost, "/login", nil)
		req.Header.Set("X-Account", account)
		req.Header.Set("X-Password", password)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return fmt.Sprint(rec.Code, rec.Header().Get("Retry-After"))
	}
	for i := range 100 {
		account := fmt.Sprint("reset", i)
		try(account, "wrong")
		if got := try(account, "secret"); got != "200" {
			t.Fatalf("%s's login: %s, want 200", account, got)
		}
	}
	for i := range 100 {
		account := fmt.Sprint("user", i)
		var got []string
		for _, password := range []string{"", "", "wrong", "wrong", "wrong", "wrong"} {
			got = append(got, try(account, password))
		}
		if want := "[400 400 401 401 401 4293600]"; fmt.Sprint(got) != want {
			t.Errorf("%s's 2 malformed, then 4 failed logins: %v, want %s (429 with Retry-After 3600)", account, got, want)
		}
	}
}

// TestChallenge is an app's test of a CAPTCHA before the limit: the
// request that reaches the Challenge is answered 429 with a challenge
// problem and no Retry-After until the app records the pass; then the
// key goes on up to its limit, and an hour later it is challenged again.
func TestChallenge(t *testing.T) {
	l, clock := ratekittest.NewLimiter(t, core.Policy{Name: "signup", Rules: []core.Rule{{Limit: 3, Window: time.Hour, Challenge: 2}}})
	h := nethttp.New(l)(hello)
	var got []string
	answer := func() {
		res := get(h)
		body, _ := io.ReadAll(res.Body)
		kind := ""
		if strings.Contains(string(body), guard.ChallengeProblemType) {
			kind = "challenge"
		}
		got = append(got, strings.TrimSpace(fmt.Sprint(res.StatusCode, " ", res.Header.Get("Retry-After"), " ", kind)))
	}
	answer()
	answer()
	if err := l.Pass(context.Background(), "192.0.2.1"); err != nil {
		t.Fatal(err)
	}
	answer()
	answer()
	answer()
	clock.Advance(time.Hour)
	answer()
	answer()
	want := "[200 429  challenge 200 200 429 3600 200 429  challenge]"
	if fmt.Sprint(got) != want {
		t.Errorf("answers: %v, want %s", got, want)
	}
}

// TestRefundAfterOtherResets: at one instant of a clock that stands
// still, the refund of a key's admission is honoured however many other
// keys were reset at that instant, on the kit as on a bare MemoryStore
// under core.WithClock, as Redis honours it: "count only failures" counts
// only failures.
func TestRefundAfterOtherResets(t *testing.T) {
	ctx := context.Background()
	clock := ratekittest.NewClock()
	l, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{Name: "p", Rules: []core.Rule{{Limit: 3, Window: time.Minute}}},
		core.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	kit, _ := ratekittest.NewLimiter(t, core.Policy{Name: "p", Rules: []core.Rule{{Limit: 3, Window: time.Minute}}})
	kept := func(l *core.Limiter) (n int) {
		for i := range 100 {
			reset, other := fmt.Sprint("reset", i), fmt.Sprint("other", i)
			_, _ = l.Allow(ctx, reset)
			_ = l.Reset(ctx, reset)
			d, _ := l.Allow(ctx, other)
			_ = d.Refund(ctx)
			if p, _ := l.Peek(ctx, other); p.Remaining != 3 {
				n++
			}
		}
		return n
	}
	if n := kept(kit); n != 0 {
		t.Errorf("on the kit, %d of 100 keys kept a unit refunded after another key's reset, want 0", n)
	}
	if n := kept(l); n != 0 {
		t.Errorf("on a MemoryStore under core.WithClock, %d of 100 keys kept a unit refunded after another key's reset, want 0", n)
	}
}
