// Package observertest drives one scenario of events through a
// core.Observer, the same for every metrics backend (ratekitprom,
// ratekitotel), so that a backend's test checks only how it shows them.
package observertest

import (
	"context"
	"errors"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/keyfunc"
)

// Run drives obs, as the observer of every limiter and guard below,
// through:
//
//   - policy "login" (2 a minute, keyed by user, on a store the limiter
//     treats as remote so that it keeps a deny cache): two admissions, a
//     denial by the store, a denial from the deny cache, a request
//     without a key (skipped) and one with a malformed key;
//   - policy "dry" (1 a minute, dry run): an admission and a denial let
//     through;
//   - policy "flaky" (a store that fails, breaker after 2 failures, 30 ms
//     cool-down): three local fallbacks, two store errors, the breaker
//     opening; whileOpen runs then; after the cool-down a store decision
//     closes it;
//   - one guard.EventBlock for "login";
//   - policy "ban" (1 a minute, Lockout of an hour): an admission, then
//     two denials that each report a lockout;
//   - policy "captcha" (3 a minute, Challenge 1, behind a guard): two
//     requests challenged, a pass (core.EventPass), then an admission.
//
// No key ("alice", "bob", "carol", "mallory", "trudy") may appear in a
// metric.
func Run(t *testing.T, obs core.Observer, whileOpen func()) {
	t.Helper()
	ctx := context.Background()

	login := guard.New(testkit.Limiter(t, remote{core.NewMemoryStore()}, testkit.Policy("login", testkit.PerMinute(2)), core.WithObserver(obs)),
		guard.WithKey(testkit.UserKey), guard.WithObserver(obs))
	for i, step := range []struct {
		user string
		want guard.Outcome
	}{
		{"alice", guard.OutcomeAllow}, {"alice", guard.OutcomeAllow}, {"alice", guard.OutcomeDeny}, {"alice", guard.OutcomeDeny},
		{"-", guard.OutcomeSkip}, {"!", guard.OutcomeInvalid},
	} {
		if v := admit(login, step.user); v.Outcome != step.want {
			t.Fatalf("login request %d (%s): outcome %v, want %v", i+1, step.user, v.Outcome, step.want)
		}
	}

	dry := guard.New(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("dry", testkit.PerMinute(1)), core.WithObserver(obs)),
		guard.WithKey(testkit.UserKey), guard.WithDryRun(true), guard.WithObserver(obs))
	for i := range 2 {
		if v := admit(dry, "bob"); v.Outcome != guard.OutcomeAllow {
			t.Fatalf("dry request %d: outcome %v, want allow", i+1, v.Outcome)
		}
	}

	store := &flakyStore{remote: remote{core.NewMemoryStore()}}
	store.fail.Store(true)
	flaky := testkit.Limiter(t, store, testkit.Policy("flaky", testkit.PerMinute(100)), core.WithObserver(obs), core.WithBreaker(2, 30*time.Millisecond))
	for i := range 3 {
		if d, err := flaky.Allow(ctx, "carol"); err != nil || d.Source != core.SourceLocal {
			t.Fatalf("flaky call %d = %+v, %v; want a local fallback", i+1, d, err)
		}
	}
	if whileOpen != nil {
		whileOpen()
	}
	store.fail.Store(false)
	time.Sleep(60 * time.Millisecond)
	if d, err := flaky.Allow(ctx, "carol"); err != nil || d.Source != core.SourceStore {
		t.Fatalf("flaky probe = %+v, %v; want a store decision", d, err)
	}

	obs.Observe(ctx, core.Event{Kind: guard.EventBlock, Policy: "login"})

	ban := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "ban",
		Rules: []core.Rule{{Limit: 1, Window: time.Minute}}, Lockout: core.Lockout{For: time.Hour}}, core.WithObserver(obs))
	for i := range 3 {
		if d, err := ban.Allow(ctx, "mallory"); err != nil || d.Allowed != (i == 0) || d.Locked != (i > 0) {
			t.Fatalf("ban call %d = %+v, %v; want allowed, then locked out", i+1, d, err)
		}
	}

	captcha := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "captcha",
		Rules: []core.Rule{{Limit: 3, Window: time.Minute, Challenge: 1}}}, core.WithObserver(obs))
	g := guard.New(captcha, guard.WithKey(testkit.UserKey), guard.WithObserver(obs))
	for i := range 2 {
		if v := admit(g, "trudy"); v.Outcome != guard.OutcomeChallenge {
			t.Fatalf("captcha request %d: outcome %v, want challenge", i+1, v.Outcome)
		}
	}
	if err := captcha.Pass(ctx, "trudy"); err != nil {
		t.Fatal(err)
	}
	if v := admit(g, "trudy"); v.Outcome != guard.OutcomeAllow {
		t.Fatalf("captcha request after Pass: outcome %v, want allow", v.Outcome)
	}
}

// admit runs g on a request with the X-User header (none for "-").
func admit(g *guard.Guard, user string) guard.Verdict {
	r := httptest.NewRequest("GET", "/", nil)
	if user != "-" {
		r.Header.Set("X-User", user)
	}
	v := g.Admit(r.Context(), keyfunc.FromHTTP(r, "/"))
	v.Finish(r.Context(), 200)
	return v
}

// flakyStore is a shared store on a MemoryStore whose Take fails while
// fail is set.
type flakyStore struct {
	remote
	fail atomic.Bool
}

func (s *flakyStore) Take(ctx context.Context, q driver.Query) (driver.Result, error) {
	if s.fail.Load() {
		return driver.Result{}, errors.New("store down")
	}
	return s.remote.Take(ctx, q)
}

// remote hides that a store is a MemoryStore, so that the limiter treats
// it as a shared store; it carries invalidations within this process
// alone, so that the limiter keeps a deny cache.
type remote struct{ core.Store }

// Watch implements driver.Invalidator: nothing is ever missed.
func (remote) Watch(_ string, f func(driver.Invalidation)) { f(driver.Invalidation{Resync: true}) }

// Invalidate implements driver.Invalidator.
func (remote) Invalidate(context.Context, string, string) error { return nil }
