package guard_test

import (
	"context"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/keyfunc"
)

func inFlight(t *testing.T, store core.Store, name string, k int64) *core.Limiter {
	t.Helper()
	l := testkit.Limiter(t, store, core.Policy{Name: name, InFlight: k})
	return l
}

// held returns the units in flight for key on l.
func held(t *testing.T, l *core.Limiter, key string) int64 {
	t.Helper()
	d, err := l.Peek(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return d.Rules()[0].Used
}

// TestInFlightFinish: Finish releases the lease of an InFlight limit
// whatever the status and whether or not count-if is set, and a second
// Finish releases nothing more; NeedsFinish says so.
func TestInFlightFinish(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		opts []guard.Option
	}{
		{"plain", nil},
		{"count-if counted", []guard.Option{guard.WithCountIf(func(int) bool { return true })}},
		{"count-if not counted", []guard.Option{guard.WithCountIf(func(int) bool { return false })}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := inFlight(t, core.NewMemoryStore(), "export", 2)
			g := guard.New(l, tc.opts...)
			if !g.NeedsFinish() {
				t.Fatal("NeedsFinish = false for an InFlight limit, want true")
			}
			a, b := g.Admit(ctx, req()), g.Admit(ctx, req())
			if a.Outcome != guard.OutcomeAllow || b.Outcome != guard.OutcomeAllow {
				t.Fatalf("two requests: %v, %v; want both admitted", a.Outcome, b.Outcome)
			}
			c := g.Admit(ctx, req())
			if c.Outcome != guard.OutcomeDeny || c.Status() != 429 {
				t.Fatalf("third request in flight: %v %d, want deny 429", c.Outcome, c.Status())
			}
			c.Finish(ctx, 429) // not admitted: nothing to release
			a.Finish(ctx, 500)
			a.Finish(ctx, 500)
			if got := held(t, l, "192.0.2.1"); got != 1 {
				t.Fatalf("after one request ended (finished twice): %d in flight, want 1", got)
			}
			b.Finish(ctx, 200)
			if got := held(t, l, "192.0.2.1"); got != 0 {
				t.Fatalf("after both ended: %d in flight, want 0", got)
			}
		})
	}
}

// TestInFlightHeaders: an InFlight limit answers with X-RateLimit-Limit
// and -Remaining but no -Reset (nothing resets at a time), the IETF item
// of quota unit "concurrent-requests" without a window, and on a denial
// Retry-After: 1, the fixed hint.
func TestInFlightHeaders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := inFlight(t, core.NewMemoryStore(), "export", 1)
	g := guard.New(l, guard.WithHeaders(guard.HeadersXRateLimit|guard.HeadersIETF))
	v := g.Admit(ctx, req())
	h := headers(&v)
	pk := h[guard.HeaderPolicy][strings.Index(h[guard.HeaderPolicy], ";pk="):]
	want := map[string]string{guard.HeaderLimit: "1", guard.HeaderRemaining: "0", guard.HeaderReset: "", guard.HeaderRetryAfter: "",
		guard.HeaderPolicy: `"export";q=1;qu="concurrent-requests"` + pk, guard.HeaderRateLimit: `"export";r=0` + pk}
	checkHeaders(t, "admitted", h, want)
	d := g.Admit(ctx, req())
	want[guard.HeaderRetryAfter] = "1"
	checkHeaders(t, "denied", headers(&d), want)
	if _, body := d.Answer(func(string, string) {}); string(body) != "rate limit exceeded: retry after 1s\n" {
		t.Errorf("denied: body %q", body)
	}
	v.Finish(ctx, 200)
}

func checkHeaders(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	for k, w := range want {
		if g, ok := got[k]; w == "" && ok || w != "" && g != w {
			t.Errorf("%s: header %s = %q, want %q", what, k, g, w)
		}
	}
}

// TestInFlightWithAlso: a concurrency limit and a rate limit on one
// route, in either order. A request denied by one consumes nothing of the
// other: the lease is released when the rate limit denies, the rate unit
// refunded when the concurrency limit denies; an admitted request keeps
// its rate unit and releases its lease at Finish.
func TestInFlightWithAlso(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const key = "192.0.2.1"
	ip := keyfunc.ClientIP()
	for _, concFirst := range []bool{true, false} {
		name := map[bool]string{true: "concurrency first", false: "rate first"}[concFirst]
		t.Run(name, func(t *testing.T) {
			store := core.NewMemoryStore()
			conc, rate := inFlight(t, store, "conc", 1), testkit.Limiter(t, store, testkit.Policy("rate", testkit.PerHour(2)))
			var g *guard.Guard
			if concFirst {
				g = guard.New(conc, guard.WithAlso(rate, ip))
			} else {
				g = guard.New(rate, guard.WithAlso(conc, ip))
			}
			if !g.NeedsFinish() {
				t.Fatal("NeedsFinish = false with an InFlight limit added, want true")
			}
			a := g.Admit(ctx, req())
			if a.Outcome != guard.OutcomeAllow {
				t.Fatalf("first: %v, want allow", a.Outcome)
			}
			// Denied by the concurrency limit: the rate unit comes back.
			d := g.Admit(ctx, req())
			if d.Outcome != guard.OutcomeDeny || d.Limiter() != conc {
				t.Fatalf("second while the first runs: %v by %s, want denied by conc", d.Outcome, d.Limiter().Policy().Name)
			}
			if got, _ := rate.Peek(ctx, key); got.Remaining != 1 {
				t.Errorf("after a denial by conc: rate Remaining = %d, want 1", got.Remaining)
			}
			a.Finish(ctx, 200)
			if got := held(t, conc, key); got != 0 {
				t.Fatalf("after the first ended: %d in flight, want 0", got)
			}
			b := g.Admit(ctx, req())
			if b.Outcome != guard.OutcomeAllow {
				t.Fatalf("third: %v, want allow", b.Outcome)
			}
			b.Finish(ctx, 200)
			// Denied by the rate limit (2 per hour spent): the lease goes.
			c := g.Admit(ctx, req())
			if c.Outcome != guard.OutcomeDeny || c.Limiter() != rate {
				t.Fatalf("fourth: %v by %s, want denied by rate", c.Outcome, c.Limiter().Policy().Name)
			}
			if got := held(t, conc, key); got != 0 {
				t.Errorf("after a denial by rate: %d in flight, want 0", got)
			}
		})
	}
}

// TestInFlightResetIfPanics: WithResetIf on an InFlight limit would drop
// the leases of other requests in flight: a programmer error.
func TestInFlightResetIfPanics(t *testing.T) {
	t.Parallel()
	defer func() {
		if p := recover(); p == nil || !strings.Contains(p.(string), "WithResetIf") {
			t.Errorf("guard.New with WithResetIf on an InFlight limit: panic %v, want one naming WithResetIf", p)
		}
	}()
	guard.New(inFlight(t, core.NewMemoryStore(), "conc", 1), guard.WithResetIf(guard.StatusSuccess))
}

// TestInFlightDryRun: in dry-run mode a request over the in-flight limit
// goes on, reported as EventDryRun, holding no lease; the admitted ones
// release theirs at Finish. The limiter reports every decision.
func TestInFlightDryRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lim, grd := &testkit.Events{}, &testkit.Events{}
	l := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "conc", InFlight: 1}, core.WithObserver(lim))
	g := guard.New(l, guard.WithDryRun(true), guard.WithObserver(grd))
	a, b := g.Admit(ctx, req()), g.Admit(ctx, req())
	if a.Outcome != guard.OutcomeAllow || a.DryRun || b.Outcome != guard.OutcomeAllow || !b.DryRun {
		t.Fatalf("two requests in dry-run: %v dry=%v, %v dry=%v; want both through, the second a dry-run denial", a.Outcome, a.DryRun, b.Outcome, b.DryRun)
	}
	if h := headers(&b); h[guard.HeaderLimit] != "" || h[guard.HeaderRetryAfter] != "" {
		t.Errorf("dry-run denial headers %v, want none", h)
	}
	if got := held(t, l, "192.0.2.1"); got != 1 {
		t.Errorf("in flight: %d, want 1 (the dry-run denial holds no lease)", got)
	}
	b.Finish(ctx, 200)
	a.Finish(ctx, 200)
	if got := held(t, l, "192.0.2.1"); got != 0 {
		t.Errorf("after both ended: %d in flight, want 0", got)
	}
	if lim.Count(core.EventDecision) != 2 || grd.Count(guard.EventDryRun) != 1 {
		t.Errorf("limiter saw %d decisions, guard %d dry-run events; want 2 and 1", lim.Count(core.EventDecision), grd.Count(guard.EventDryRun))
	}
}
