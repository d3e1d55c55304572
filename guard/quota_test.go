package guard_test

import (
	"context"
	"encoding/json"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/keyfunc"
)

// stepped returns a limiter on a memory store whose clock is *now.
func stepped(t *testing.T, p core.Policy, now *time.Time) *core.Limiter {
	t.Helper()
	l := testkit.Limiter(t, core.NewMemoryStore(), p, core.WithClock(func() time.Time { return *now }))
	return l
}

// noPK drops the partition keys of an IETF field.
func noPK(field string) string { return pkParam.ReplaceAllString(field, "") }

var pkParam = regexp.MustCompile(`;pk=:[^:]*:`)

// TestCalendarAnswer: a calendar rule is named by its period in the IETF
// fields and problem bodies, its w is the length of its current period,
// and X-RateLimit-Reset and Retry-After run to the period's end when it
// binds.
func TestCalendarAnswer(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2024, 2, 29, 23, 0, 0, 0, time.UTC) // the month ends in an hour
	l := stepped(t, core.Policy{Name: "api", Rules: []core.Rule{
		{Limit: 10, Window: time.Second},
		{Limit: 3, Calendar: core.Month},
	}}, &now)
	g := guard.New(l, guard.WithHeaders(guard.HeadersXRateLimit|guard.HeadersIETF), guard.WithBody(guard.BodyProblem))
	v := g.Admit(ctx, req())
	h := headers(&v)
	if h[guard.HeaderLimit] != "3" || h[guard.HeaderRemaining] != "2" || h[guard.HeaderReset] != "3600" {
		t.Errorf("first request: X-RateLimit %s/%s/%s, want 3/2/3600 (the month binds, ending in an hour)",
			h[guard.HeaderLimit], h[guard.HeaderRemaining], h[guard.HeaderReset])
	}
	if got, want := noPK(h[guard.HeaderPolicy]), `"api-1s";q=10;w=1, "api-month";q=3;w=2505600`; got != want {
		t.Errorf("RateLimit-Policy = %q, want %q (February 2024: 29 days)", got, want)
	}
	if got, want := noPK(h[guard.HeaderRateLimit]), `"api-1s";r=9;t=1, "api-month";r=2;t=3600`; got != want {
		t.Errorf("RateLimit = %q, want %q", got, want)
	}
	g.Admit(ctx, req())
	now = now.Add(time.Second)
	g.Admit(ctx, req())
	v = g.Admit(ctx, req())
	h = headers(&v)
	if v.Outcome != guard.OutcomeDeny || v.ItemName() != "api-month" || h[guard.HeaderRetryAfter] != "3599" || h[guard.HeaderReset] != "3599" {
		t.Fatalf("fourth request = %v, item %q, Retry-After %q, Reset %q; want denied by api-month, both 3599",
			v.Outcome, v.ItemName(), h[guard.HeaderRetryAfter], h[guard.HeaderReset])
	}
	_, body := v.Answer(func(string, string) {})
	var doc struct {
		Violated []string `json:"violated-policies"`
		Retry    int      `json:"retry-after"`
	}
	if err := json.Unmarshal(body, &doc); err != nil || len(doc.Violated) != 1 || doc.Violated[0] != "api-month" || doc.Retry != 3599 {
		t.Errorf("problem body %s: %v, want api-month violated, retry-after 3599", body, err)
	}
}

// TestLockoutAnswer: a denial of a key locked out says when the lockout
// ends, in Retry-After and the reset fields, with nothing remaining.
func TestLockoutAnswer(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	l := stepped(t, core.Policy{Name: "login", Rules: []core.Rule{{Limit: 2, Window: time.Minute}},
		Lockout: core.Lockout{For: 24 * time.Hour}}, &now)
	g := guard.New(l, guard.WithHeaders(guard.HeadersXRateLimit|guard.HeadersIETF))
	g.Admit(ctx, req())
	g.Admit(ctx, req())
	g.Admit(ctx, req()) // denied: locked out for a day
	now = now.Add(time.Hour)
	v := g.Admit(ctx, req())
	h := headers(&v)
	if v.Outcome != guard.OutcomeDeny || !v.Decision.Locked {
		t.Fatalf("request an hour into the lockout = %v %+v, want denied, locked out", v.Outcome, v.Decision)
	}
	const left = "82800" // 23 h
	if h[guard.HeaderRetryAfter] != left || h[guard.HeaderRemaining] != "0" || h[guard.HeaderReset] != left {
		t.Errorf("Retry-After %q, X-RateLimit-Remaining %q, X-RateLimit-Reset %q; want %s, 0, %s",
			h[guard.HeaderRetryAfter], h[guard.HeaderRemaining], h[guard.HeaderReset], left, left)
	}
	if got, want := noPK(h[guard.HeaderRateLimit]), `"login";r=0;t=82800`; got != want {
		t.Errorf("RateLimit = %q, want %q: no quota until the lockout ends", got, want)
	}
	if _, body := v.Answer(func(string, string) {}); string(body) != "rate limit exceeded: retry after 82800s\n" {
		t.Errorf("body %q, want the lockout's wait", body)
	}
}

// TestLockoutAlso: with WithAlso, a lockout is its own limit's: a request
// another limit denies is refunded to it and is no offence of its; a key
// locked out is refused before the other limits are asked.
func TestLockoutAlso(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	account := stepped(t, core.Policy{Name: "account", Rules: []core.Rule{testkit.PerHour(1)}, Lockout: core.Lockout{For: time.Hour}}, &now)
	ip := stepped(t, core.Policy{Name: "ip", Rules: []core.Rule{testkit.PerHour(2)}}, &now)
	g := guard.New(account, guard.WithKey(testkit.UserKey), guard.WithAlso(ip, keyfunc.ClientIP()))
	for _, u := range []string{"a", "b"} {
		if v := g.Admit(ctx, req().with("X-User", u)); v.Outcome != guard.OutcomeAllow {
			t.Fatalf("user %s: %v, want allowed", u, v.Outcome)
		}
	}
	// The IP is full: c is refused by it, which is no offence of c's.
	if v := g.Admit(ctx, req().with("X-User", "c")); v.Outcome != guard.OutcomeDeny || v.Limiter() != ip || v.Decision.Locked {
		t.Fatalf("user c = %v by %s Locked %v, want denied by ip, not locked", v.Outcome, v.Limiter().Policy().Name, v.Decision.Locked)
	}
	if d, _ := account.Peek(ctx, "c"); !d.Allowed || d.Locked || d.Remaining != 1 {
		t.Errorf("account c after the ip's denial = %+v, want untouched", d)
	}
	// a's second attempt: a's own limit denies and locks a out.
	v := g.Admit(ctx, req().with("X-User", "a"))
	if v.Outcome != guard.OutcomeDeny || v.Limiter() != account || !v.Decision.Locked || v.Decision.RetryAfter != time.Hour {
		t.Fatalf("user a again = %v by %s %+v, want locked out by account for an hour", v.Outcome, v.Limiter().Policy().Name, v.Decision)
	}
	// Locked out: refused by the account limit before the ip is asked,
	// even from a fresh address.
	r := req().with("X-User", "a")
	r.peer = "192.0.2.9:1"
	now = now.Add(2 * time.Hour / 3)
	if v := g.Admit(ctx, r); v.Limiter() != account || !v.Decision.Locked {
		t.Errorf("user a from another address = %v by %s, want locked out by account", v.Outcome, v.Limiter().Policy().Name)
	}
	if d, _ := ip.Peek(ctx, "192.0.2.9"); d.Remaining != 2 {
		t.Errorf("ip 192.0.2.9 after a's locked-out request: Remaining %d, want 2", d.Remaining)
	}
}

// TestForeverLockoutAnswer: a lockout near the longest duration (a
// "forever" ban) is answered with valid non-negative integers in every
// field, never a negative wrapped one.
func TestForeverLockoutAnswer(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	forever := time.Duration(math.MaxInt64).Truncate(time.Microsecond)
	l := stepped(t, core.Policy{Name: "ban", Rules: []core.Rule{{Limit: 1, Window: time.Minute}},
		Lockout: core.Lockout{For: forever}}, &now)
	g := guard.New(l, guard.WithHeaders(guard.HeadersXRateLimit|guard.HeadersIETF), guard.WithBody(guard.BodyProblem))
	g.Admit(ctx, req())
	v := g.Admit(ctx, req()) // denied: locked out "forever"
	if v.Outcome != guard.OutcomeDeny || !v.Decision.Locked {
		t.Fatalf("second request = %v %+v, want denied, locked out", v.Outcome, v.Decision)
	}
	h := headers(&v)
	for _, name := range []string{guard.HeaderRetryAfter, guard.HeaderReset} {
		n, err := strconv.ParseInt(h[name], 10, 64)
		if err != nil || n < 1 {
			t.Errorf("%s = %q, want a positive integer", name, h[name])
		}
	}
	for _, name := range []string{guard.HeaderPolicy, guard.HeaderRateLimit} {
		if strings.Contains(h[name], "=-") {
			t.Errorf("%s = %q holds a negative integer", name, h[name])
		}
	}
	_, body := v.Answer(func(string, string) {})
	var doc struct {
		Retry int64 `json:"retry-after"`
	}
	if err := json.Unmarshal(body, &doc); err != nil || doc.Retry < 1 {
		t.Errorf("problem body %s: %v, want a positive retry-after", body, err)
	}
	for _, d := range []time.Duration{math.MaxInt64, math.MaxInt64 - time.Second + 2, -time.Second, math.MinInt64} {
		if s := guard.Seconds(d); s < 0 || d > 0 && s < int64(d/time.Second) {
			t.Errorf("Seconds(%d) = %d, want the delta-seconds of d, rounded up, never negative", int64(d), s)
		}
	}
}

// TestIETFResetIsMoreQuota: an item's t is the time until more quota is
// available (draft-10 §4.1.2), not until the window is empty, and on a
// denial it is when the request fits, so that Retry-After never points
// earlier (§5); X-RateLimit-Reset stays the time until the window is
// empty (issue 20 item 11).
func TestIETFResetIsMoreQuota(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		algo core.Algorithm
		// The answers: the draft's example (t, X-RateLimit-Reset), then the
		// denial's second request (t) and third (Retry-After and t,
		// X-RateLimit-Reset). SlidingBuckets counts a bucket (1 s wide
		// here) whole while any of it is in the window: 1 s later.
		draftT, draftReset, secondT, retry, reset string
	}{
		{core.SlidingLog, "58", "60", "5", "4", "9"},
		{core.SlidingBuckets, "59", "61", "6", "5", "10"},
	} {
		algo := tc.algo
		t.Run(algo.String(), func(t *testing.T) {
			t.Run("draft example", func(t *testing.T) {
				// q=100;w=60: 39 units at 0 s, one at 2 s give r=60;t=58.
				now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
				l := stepped(t, core.Policy{Name: "api", Algorithm: algo, Rules: []core.Rule{{Limit: 100, Window: time.Minute}}}, &now)
				g := guard.New(l, guard.WithHeaders(guard.HeadersXRateLimit|guard.HeadersIETF), guard.WithCost(func(keyfunc.Request) int64 {
					if now.Second() == 0 {
						return 39
					}
					return 1
				}))
				g.Admit(ctx, req())
				now = now.Add(2 * time.Second)
				v := g.Admit(ctx, req())
				h := headers(&v)
				if got, want := noPK(h[guard.HeaderRateLimit]), `"api";r=60;t=`+tc.draftT; got != want {
					t.Errorf("RateLimit = %q, want %q: t is when the 39 units of 0 s leave", got, want)
				}
				if h[guard.HeaderReset] != tc.draftReset {
					t.Errorf("X-RateLimit-Reset = %q, want %s: when the window is empty", h[guard.HeaderReset], tc.draftReset)
				}
			})
			t.Run("denial", func(t *testing.T) {
				// 2 per 10 s, requests at 0 s and 5 s; a third at 6 s.
				now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
				l := stepped(t, core.Policy{Name: "api", Algorithm: algo, Rules: []core.Rule{{Limit: 2, Window: 10 * time.Second}}}, &now)
				g := guard.New(l, guard.WithHeaders(guard.HeadersXRateLimit|guard.HeadersIETF))
				g.Admit(ctx, req())
				now = now.Add(5 * time.Second)
				v := g.Admit(ctx, req())
				if got, want := noPK(headers(&v)[guard.HeaderRateLimit]), `"api";r=0;t=`+tc.secondT; got != want {
					t.Errorf("second request: RateLimit = %q, want %q: the unit of 0 s leaves at 10 s", got, want)
				}
				now = now.Add(time.Second)
				v = g.Admit(ctx, req())
				h := headers(&v)
				if v.Outcome != guard.OutcomeDeny || h[guard.HeaderRetryAfter] != tc.retry {
					t.Fatalf("third request = %v, Retry-After %q; want denied, %s", v.Outcome, h[guard.HeaderRetryAfter], tc.retry)
				}
				if got, want := noPK(h[guard.HeaderRateLimit]), `"api";r=0;t=`+tc.retry; got != want {
					t.Errorf("RateLimit = %q, want %q: Retry-After must not be earlier than t", got, want)
				}
				if h[guard.HeaderReset] != tc.reset {
					t.Errorf("X-RateLimit-Reset = %q, want %s: when the window is empty", h[guard.HeaderReset], tc.reset)
				}
			})
		})
	}
}
