package ratekittest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/ratekittest"
)

// A scenario is a policy and the steps of a test of it: each step moves
// the clock, then makes one call and says the decision it gets.
type scenario struct {
	name   string
	start  time.Time // the clock's start; zero: ratekittest.NewClock's
	policy core.Policy
	steps  []step
}

// A step moves the clock by advance, then calls the limiter.
type step struct {
	advance time.Duration
	op      op
	n       int64  // the units of an opAllow; 1 when 0
	want    string // the decision of an opAllow or opPeek, as summary writes it
}

type op uint8

const (
	opAllow  op = iota // AllowN(key, n)
	opPeek             // Peek(key)
	opPass             // Pass(key): a challenge passed
	opRefund           // Refund the latest admission not yet refunded: a request ended
	opReset            // Reset(key)
)

// summary writes what a decision says to a client: admitted or not (and
// why), the binding rule's remaining units out of its limit, RetryAfter
// and ResetAfter.
func summary(d core.Decision) string {
	verdict := "denied"
	switch {
	case d.Allowed:
		verdict = "allowed"
	case d.Locked:
		verdict = "locked"
	case d.Challenged:
		verdict = "challenged"
	}
	return fmt.Sprintf("%s %d/%d retry=%v reset=%v", verdict, d.Remaining, d.Limit, d.RetryAfter, d.ResetAfter)
}

var paris = mustLoad("Europe/Paris")

func mustLoad(name string) *time.Location {
	loc, err := time.LoadLocation(name)
	if err != nil {
		panic(err)
	}
	return loc
}

// scenarios are a test of every kind of policy, on the clock alone.
func scenarios() []scenario {
	min := time.Minute
	return []scenario{
		{name: "sliding log", policy: core.Policy{Name: "log", Rules: []core.Rule{{Limit: 3, Window: min}}}, steps: []step{
			{want: "allowed 2/3 retry=0s reset=1m0s"},
			{advance: 10 * time.Second, want: "allowed 1/3 retry=0s reset=1m0s"},
			{advance: 10 * time.Second, want: "allowed 0/3 retry=0s reset=1m0s"},
			{want: "denied 0/3 retry=40s reset=1m0s"},
			{advance: 39 * time.Second, want: "denied 0/3 retry=1s reset=21s"},
			{advance: time.Second, want: "allowed 0/3 retry=0s reset=1m0s"},
			{op: opPeek, want: "denied 0/3 retry=10s reset=1m0s"},
		}},
		{name: "sliding buckets", policy: core.Policy{Name: "buckets", Rules: []core.Rule{{Limit: 4, Window: min}},
			Algorithm: core.SlidingBuckets, Buckets: 6}, steps: []step{
			{advance: 5 * time.Second, n: 3, want: "allowed 1/4 retry=0s reset=1m5s"},
			{advance: 10 * time.Second, want: "allowed 0/4 retry=0s reset=1m5s"},
			{want: "denied 0/4 retry=55s reset=1m5s"},
			{advance: 64 * time.Second, want: "allowed 2/4 retry=0s reset=1m1s"},
			{advance: time.Second, n: 3, want: "allowed 0/4 retry=0s reset=1m10s"},
		}},
		{name: "several rules", policy: core.Policy{Name: "sms", Rules: []core.Rule{{Limit: 1, Window: min}, {Limit: 3, Window: time.Hour}}}, steps: []step{
			{want: "allowed 0/1 retry=0s reset=1m0s"},
			{advance: 30 * time.Second, want: "denied 0/1 retry=30s reset=30s"},
			{advance: 30 * time.Second, want: "allowed 0/1 retry=0s reset=1m0s"},
			{advance: min, want: "allowed 0/3 retry=0s reset=1h0m0s"},
			{advance: min, want: "denied 0/3 retry=57m0s reset=59m0s"},
			{op: opPeek, want: "denied 0/3 retry=57m0s reset=59m0s"},
			{advance: 57 * min, want: "allowed 0/3 retry=0s reset=1h0m0s"},
		}},
		{name: "cost, refund and reset", policy: core.Policy{Name: "cost", Rules: []core.Rule{{Limit: 10, Window: min}}}, steps: []step{
			{n: 4, want: "allowed 6/10 retry=0s reset=1m0s"},
			{advance: time.Second, n: 7, want: "denied 6/10 retry=59s reset=59s"},
			{op: opRefund},
			{op: opPeek, want: "allowed 10/10 retry=0s reset=0s"},
			{n: 10, want: "allowed 0/10 retry=0s reset=1m0s"},
			{advance: time.Second, op: opReset},
			{n: 10, want: "allowed 0/10 retry=0s reset=1m0s"},
		}},
		{name: "refund after a reset at the same time", policy: core.Policy{Name: "resetrefund", Rules: []core.Rule{{Limit: 3, Window: min}}}, steps: []step{
			{want: "allowed 2/3 retry=0s reset=1m0s"},
			{op: opReset},
			{want: "allowed 2/3 retry=0s reset=1m0s"},
			{op: opRefund},
			{op: opPeek, want: "allowed 3/3 retry=0s reset=0s"},
		}},
		{name: "buckets refund", policy: core.Policy{Name: "bucketsrefund", Rules: []core.Rule{{Limit: 5, Window: min}},
			Algorithm: core.SlidingBuckets, Buckets: 4}, steps: []step{
			{advance: 20 * time.Second, n: 2, want: "allowed 3/5 retry=0s reset=1m10s"},
			{advance: 20 * time.Second, n: 3, want: "allowed 0/5 retry=0s reset=1m5s"},
			{op: opRefund},
			{op: opPeek, want: "allowed 3/5 retry=0s reset=50s"},
			{n: 4, want: "denied 3/5 retry=50s reset=50s"},
		}},
		{name: "calendar day in Paris", start: time.Date(2029, 1, 1, 23, 30, 0, 0, paris),
			policy: core.Policy{Name: "day", Rules: []core.Rule{{Limit: 2, Calendar: core.Day, Location: paris}}}, steps: []step{
				{want: "allowed 1/2 retry=0s reset=30m0s"},
				{want: "allowed 0/2 retry=0s reset=30m0s"},
				{advance: 10 * min, want: "denied 0/2 retry=20m0s reset=20m0s"},
				{advance: 20 * min, want: "allowed 1/2 retry=0s reset=24h0m0s"},
			}},
		{name: "calendar day of a clock change", start: time.Date(2029, 3, 25, 0, 0, 0, 0, paris),
			policy: core.Policy{Name: "dst", Rules: []core.Rule{{Limit: 1, Calendar: core.Day, Location: paris}}}, steps: []step{
				{want: "allowed 0/1 retry=0s reset=23h0m0s"},
				{advance: 22 * time.Hour, want: "denied 0/1 retry=1h0m0s reset=1h0m0s"},
				{advance: time.Hour, want: "allowed 0/1 retry=0s reset=24h0m0s"},
			}},
		{name: "calendar week", policy: core.Policy{Name: "week", Rules: []core.Rule{{Limit: 1, Calendar: core.Week}}}, steps: []step{
			{advance: 12 * time.Hour, want: "allowed 0/1 retry=0s reset=156h0m0s"},
			{advance: 6 * 24 * time.Hour, want: "denied 0/1 retry=12h0m0s reset=12h0m0s"},
			{advance: 12 * time.Hour, want: "allowed 0/1 retry=0s reset=168h0m0s"},
		}},
		{name: "calendar month and a sliding rule", start: time.Date(2029, 2, 28, 12, 0, 0, 0, time.UTC),
			policy: core.Policy{Name: "month", Rules: []core.Rule{{Limit: 2, Window: time.Hour}, {Limit: 3, Calendar: core.Month}}}, steps: []step{
				{want: "allowed 1/2 retry=0s reset=1h0m0s"},
				{want: "allowed 0/2 retry=0s reset=1h0m0s"},
				{advance: time.Hour, want: "allowed 0/3 retry=0s reset=11h0m0s"},
				{advance: time.Hour, want: "denied 0/3 retry=10h0m0s reset=10h0m0s"},
				{advance: 10 * time.Hour, want: "allowed 1/2 retry=0s reset=1h0m0s"},
			}},
		{name: "lockout, escalating", policy: core.Policy{Name: "login", Rules: []core.Rule{{Limit: 2, Window: min}},
			Lockout: core.Lockout{For: 5 * min, Max: 20 * min}}, steps: []step{
			{want: "allowed 1/2 retry=0s reset=1m0s"},
			{want: "allowed 0/2 retry=0s reset=1m0s"},
			{want: "locked 0/2 retry=5m0s reset=5m0s"},
			{advance: 4 * min, want: "locked 0/2 retry=1m0s reset=1m0s"},
			{op: opPeek, want: "locked 0/2 retry=1m0s reset=1m0s"},
			{advance: min, want: "allowed 1/2 retry=0s reset=1m0s"},
			{want: "allowed 0/2 retry=0s reset=1m0s"},
			{want: "locked 0/2 retry=10m0s reset=10m0s"},
			{advance: 10 * min, want: "allowed 1/2 retry=0s reset=1m0s"},
			{want: "allowed 0/2 retry=0s reset=1m0s"},
			{want: "locked 0/2 retry=20m0s reset=20m0s"},
			{advance: 20 * min, want: "allowed 1/2 retry=0s reset=1m0s"},
			{want: "allowed 0/2 retry=0s reset=1m0s"},
			{want: "locked 0/2 retry=20m0s reset=20m0s"},
			{advance: 20 * min, op: opReset},
			{want: "allowed 1/2 retry=0s reset=1m0s"},
		}},
		{name: "lockout forgotten", policy: core.Policy{Name: "forgotten", Rules: []core.Rule{{Limit: 1, Window: min}},
			Lockout: core.Lockout{For: min, Max: 2 * min}}, steps: []step{
			{want: "allowed 0/1 retry=0s reset=1m0s"},
			{want: "locked 0/1 retry=1m0s reset=1m0s"},
			{advance: min, want: "allowed 0/1 retry=0s reset=1m0s"},
			{want: "locked 0/1 retry=2m0s reset=2m0s"},
			{advance: 2 * min, want: "allowed 0/1 retry=0s reset=1m0s"},
			{advance: min + time.Second, want: "allowed 0/1 retry=0s reset=1m0s"},
			{want: "locked 0/1 retry=2m0s reset=2m0s"},
			{advance: min, want: "locked 0/1 retry=1m0s reset=1m0s"},
			{advance: 3*min + time.Second, want: "allowed 0/1 retry=0s reset=1m0s"},
			{want: "locked 0/1 retry=1m0s reset=1m0s"},
		}},
		{name: "challenge, then lockout", policy: core.Policy{Name: "captchalock", Rules: []core.Rule{{Limit: 3, Window: time.Hour, Challenge: 2}},
			Lockout: core.Lockout{For: 10 * min}}, steps: []step{
			{want: "allowed 2/3 retry=0s reset=1h0m0s"},
			{want: "challenged 2/3 retry=0s reset=1h0m0s"},
			{op: opPass},
			{want: "allowed 1/3 retry=0s reset=1h0m0s"},
			{want: "allowed 0/3 retry=0s reset=1h0m0s"},
			{want: "locked 0/3 retry=1h0m0s reset=1h0m0s"},
			{advance: 10 * min, op: opPeek, want: "denied 0/3 retry=50m0s reset=50m0s"},
		}},
		{name: "challenge", policy: core.Policy{Name: "captcha", Rules: []core.Rule{{Limit: 5, Window: time.Hour, Challenge: 3}}}, steps: []step{
			{want: "allowed 4/5 retry=0s reset=1h0m0s"},
			{want: "allowed 3/5 retry=0s reset=1h0m0s"},
			{want: "challenged 3/5 retry=0s reset=1h0m0s"},
			{want: "challenged 3/5 retry=0s reset=1h0m0s"},
			{op: opPass},
			{want: "allowed 2/5 retry=0s reset=1h0m0s"},
			{want: "allowed 1/5 retry=0s reset=1h0m0s"},
			{want: "allowed 0/5 retry=0s reset=1h0m0s"},
			{want: "denied 0/5 retry=1h0m0s reset=1h0m0s"},
			{advance: time.Hour, want: "allowed 4/5 retry=0s reset=1h0m0s"},
			{want: "allowed 3/5 retry=0s reset=1h0m0s"},
			{want: "challenged 3/5 retry=0s reset=1h0m0s"},
		}},
		{name: "in flight", policy: core.Policy{Name: "inflight", InFlight: 2}, steps: []step{
			{want: "allowed 1/2 retry=0s reset=0s"},
			{want: "allowed 0/2 retry=0s reset=0s"},
			{want: "denied 0/2 retry=1s reset=0s"},
			{op: opPeek, want: "denied 0/2 retry=1s reset=0s"},
			{advance: 10 * time.Second, op: opRefund},
			{want: "allowed 0/2 retry=0s reset=0s"},
			{want: "denied 0/2 retry=1s reset=0s"},
			{op: opReset},
			{want: "allowed 1/2 retry=0s reset=0s"},
		}},
	}
}

// decided is what a step decided, and when.
type decided struct {
	at      time.Time
	summary string // "" for a step that decides nothing
}

// play runs s on l, whose clock is clock, and returns what each step
// decided.
func play(t *testing.T, s scenario, l *core.Limiter, clock *ratekittest.Clock) []decided {
	t.Helper()
	ctx := context.Background()
	if !s.start.IsZero() {
		clock.Set(s.start)
	}
	const key = "203.0.113.7"
	var admitted []core.Decision
	out := make([]decided, len(s.steps))
	for i, st := range s.steps {
		clock.Advance(st.advance)
		out[i].at = clock.Now()
		var (
			d   core.Decision
			err error
		)
		switch st.op {
		case opAllow:
			d, err = l.AllowN(ctx, key, max(st.n, 1))
			if d.Allowed {
				admitted = append(admitted, d)
			}
		case opPeek:
			d, err = l.Peek(ctx, key)
		case opPass:
			err = l.Pass(ctx, key)
		case opRefund:
			if len(admitted) == 0 {
				t.Fatalf("step %d: nothing admitted to refund", i)
			}
			err = admitted[len(admitted)-1].Refund(ctx)
			admitted = admitted[:len(admitted)-1]
		case opReset:
			err = l.Reset(ctx, key)
		}
		if err != nil {
			t.Fatalf("step %d at %v (op %d): %v", i, out[i].at, st.op, err)
		}
		if st.op == opAllow || st.op == opPeek {
			if d.Source != core.SourceStore && d.Source != core.SourceCache {
				t.Fatalf("step %d at %v: decided by %v, want the store (or its deny cache)", i, out[i].at, d.Source)
			}
			out[i].summary = summary(d)
		}
	}
	return out
}

// TestScenarios runs every scenario on a limiter of ratekittest.NewLimiter:
// each kind of policy, used up, then admitted again once the clock has
// moved on, with the exact Remaining, RetryAfter and ResetAfter.
func TestScenarios(t *testing.T) {
	for _, s := range scenarios() {
		t.Run(s.name, func(t *testing.T) {
			l, clock := ratekittest.NewLimiter(t, s.policy)
			for i, got := range play(t, s, l, clock) {
				if want := s.steps[i].want; got.summary != want {
					t.Errorf("step %d at %v: %s, want %s", i, got.at, got.summary, want)
				}
			}
		})
	}
}
