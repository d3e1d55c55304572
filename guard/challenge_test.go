package guard_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/keyfunc"
)

// loginPolicy is Limit 5 and Challenge 3 an hour.
func loginPolicy(name string) core.Policy {
	return core.Policy{Name: name, Rules: []core.Rule{{Limit: 5, Window: time.Hour, Challenge: 3}}}
}

// TestChallengeOutcome: a request reaching the Challenge is
// OutcomeChallenge: it does not proceed, is answered 429 with the
// challenge's problem type (whatever WithBody says), the rate-limit
// headers and no Retry-After; after a pass the requests go on up to the
// limit, then OutcomeDeny.
func TestChallengeOutcome(t *testing.T) {
	for _, body := range []guard.BodyStyle{guard.BodyText, guard.BodyProblem} {
		l := testkit.Limiter(t, core.NewMemoryStore(), loginPolicy("login-outcome"))
		g := guard.New(l, guard.WithKey(testkit.UserKey), guard.WithBody(body))
		ctx := context.Background()
		alice := req().with(testkit.UserHeader, "alice")
		for i := range 2 {
			if v := g.Admit(ctx, alice); v.Outcome != guard.OutcomeAllow {
				t.Fatalf("body %d: request %d: outcome %v, want allow", body, i+1, v.Outcome)
			}
		}
		for i := range 3 {
			v := g.Admit(ctx, alice)
			if v.Outcome != guard.OutcomeChallenge || v.Proceed() || v.Status() != http.StatusTooManyRequests || !v.Decision.Challenged {
				t.Fatalf("body %d: request 3, try %d: outcome %v, status %d, decision %+v; want challenge, 429", body, i+1, v.Outcome, v.Status(), v.Decision)
			}
			h := headers(&v)
			if h[guard.HeaderRetryAfter] != "" || h[guard.HeaderLimit] != "5" || h[guard.HeaderRemaining] != "3" {
				t.Errorf("body %d: challenge headers %v, want X-RateLimit-Limit 5, Remaining 3 and no Retry-After", body, h)
			}
			ct := map[string]string{}
			status, b := v.Answer(func(k, val string) { ct[k] = val })
			var p map[string]any
			if err := json.Unmarshal(b, &p); err != nil {
				t.Fatalf("body %d: challenge body %q is not JSON: %v", body, b, err)
			}
			if status != 429 || ct["Content-Type"] != "application/problem+json" || p["type"] != guard.ChallengeProblemType ||
				p["status"] != float64(429) || p["title"] != "Challenge required" || p["retry-after"] != nil {
				t.Errorf("body %d: challenge answer %d %v %s, want 429 application/problem+json of type %s", body, status, ct, b, guard.ChallengeProblemType)
			}
			if ps, _ := p["challenged-policies"].([]any); len(ps) != 1 || ps[0] != "login-outcome" {
				t.Errorf("body %d: challenged-policies %v, want [login-outcome]", body, p["challenged-policies"])
			}
			if strings.Contains(string(b), "alice") {
				t.Errorf("body %d: challenge body %s shows the key", body, b)
			}
		}
		if err := l.Pass(ctx, "alice"); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if v := g.Admit(ctx, alice); v.Outcome != guard.OutcomeAllow {
				t.Fatalf("body %d: request %d after Pass: outcome %v, want allow", body, i+3, v.Outcome)
			}
		}
		if v := g.Admit(ctx, alice); v.Outcome != guard.OutcomeDeny {
			t.Fatalf("body %d: request 6 after Pass: outcome %v, want deny", body, v.Outcome)
		}
	}
}

// TestChallengeAlso: a challenge by a limit added with WithAlso refunds
// the units the guard's own limit took; one by the guard's own limit
// leaves the added limit untouched. In dry-run mode a challenge goes on,
// reported as EventDryRun.
func TestChallengeAlso(t *testing.T) {
	ctx := context.Background()
	ip := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("login-ip-also", testkit.PerHour(100)))
	account := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "login-account-also", Rules: []core.Rule{{Limit: 5, Window: time.Hour, Challenge: 1}}})
	g := guard.New(ip, guard.WithKey(keyfunc.ClientIP()), guard.WithAlso(account, testkit.UserKey))
	for range 3 {
		v := g.Admit(ctx, req().with(testkit.UserHeader, "bob"))
		if v.Outcome != guard.OutcomeChallenge || v.Limiter() != account || v.Key != "bob" {
			t.Fatalf("outcome %v by %v for %q, want a challenge by the account limit for bob", v.Outcome, v.Limiter().Policy().Name, v.Key)
		}
	}
	if d, _ := ip.Peek(ctx, "192.0.2.1"); d.Rules()[0].Used != 0 {
		t.Errorf("ip limit after 3 challenges by the added limit: Used %d, want 0 (refunded)", d.Rules()[0].Used)
	}

	obs := &testkit.Events{}
	dry := guard.New(account, guard.WithKey(testkit.UserKey), guard.WithDryRun(true), guard.WithObserver(obs))
	v := dry.Admit(ctx, req().with(testkit.UserHeader, "carol"))
	if !v.Proceed() || !v.DryRun || !v.Decision.Challenged {
		t.Errorf("dry run: outcome %v, DryRun %v, decision %+v; want a challenge let through", v.Outcome, v.DryRun, v.Decision)
	}
	if obs.Count(guard.EventDryRun) != 1 {
		t.Errorf("dry run: %d EventDryRun, want 1", obs.Count(guard.EventDryRun))
	}
}

// TestChallengeOutbound: the outgoing pipeline refuses a policy with a
// Challenge at construction, and Wait answers a challenge at once.
func TestChallengeOutbound(t *testing.T) {
	l := testkit.Limiter(t, core.NewMemoryStore(), loginPolicy("login-outbound"))
	g := guard.New(l, guard.WithKey(testkit.UserKey))
	if err := g.CheckOutbound(); err == nil || !strings.Contains(err.Error(), "Challenge") || !strings.Contains(err.Error(), "login-outbound") {
		t.Errorf("CheckOutbound() = %v, want an error naming the policy and its Challenge", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r := req().with(testkit.UserHeader, "dave")
	for range 2 {
		if v := g.Wait(ctx, r); v.Outcome != guard.OutcomeAllow {
			t.Fatalf("Wait: outcome %v, want allow", v.Outcome)
		}
	}
	start := time.Now()
	if v := g.Wait(ctx, r); v.Outcome != guard.OutcomeChallenge || time.Since(start) > time.Second {
		t.Errorf("Wait at the Challenge: outcome %v after %v, want a challenge at once", v.Outcome, time.Since(start))
	}
}
