package core_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/driver/drivertest"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// TestCalendarTiers: a tier carries its customer's time zone; tiers must
// keep the policy's periods, with limits and locations of their own.
func TestCalendarTiers(t *testing.T) {
	// Redis: internal/test/redissuite's CalendarTiers.
	testkit.CalendarTiers(t, testkit.Memory)

	// A tier must keep the policy's periods.
	p := testkit.NewPlans(nil) // the tiers fail validation: no key is resolved
	base := core.Policy{Name: "api", Rules: []core.Rule{{Limit: 10, Window: time.Second}, {Limit: 100, Calendar: core.Month}}}
	for name, rules := range map[string][]core.Rule{
		"a window for the month": {{Limit: 100, Window: time.Second}, {Limit: 1000, Window: 720 * time.Hour}},
		"a day for the month":    {{Limit: 100, Window: time.Second}, {Limit: 1000, Calendar: core.Day}},
		"no month":               {{Limit: 100, Window: time.Second}},
	} {
		_, err := core.NewLimiter(core.NewMemoryStore(), base, core.WithTiers(p.Resolve, map[string][]core.Rule{"x": rules}))
		if err == nil || !strings.Contains(err.Error(), `tier "x"`) || !strings.Contains(err.Error(), "month") {
			t.Errorf("NewLimiter with a tier of %s = %v, want an error naming the tier and the policy's periods", name, err)
		}
	}
}

// TestCalendarShards: each shard holds its share of a calendar rule, and
// together they admit exactly the limit.
func TestCalendarShards(t *testing.T) {
	// Redis: internal/test/redissuite's CalendarShards.
	testkit.CalendarShards(t, testkit.Memory)
}

// TestCalendarFailurePolicyWindow: when the store fails, a FailOpen or
// FailClosed answer of a calendar-only policy gives the length of the
// period that holds now as its Window, as the store's answers do (23 h
// on the day Paris moves its clocks forward), never 0.
func TestCalendarFailurePolicyWindow(t *testing.T) {
	paris := drivertest.Zone(t, "Europe/Paris")
	clk := drivertest.NewClock(time.Date(2026, 3, 29, 15, 0, 0, 0, paris))
	for _, tc := range []struct {
		failure     core.FailurePolicy
		wantAllowed bool
		wantSource  core.Source
	}{
		{core.FailOpen, true, core.SourceOpen},
		{core.FailClosed, false, core.SourceClosed},
	} {
		t.Run(tc.failure.String(), func(t *testing.T) {
			store := newFaultyStore()
			store.mode.Store(modeFail)
			l, err := core.NewLimiter(store, core.Policy{Name: "billing", Rules: []core.Rule{
				{Limit: 1000, Calendar: core.Day, Location: paris},
				{Limit: 20000, Calendar: core.Month, Location: paris},
			}}, core.WithFailurePolicy(tc.failure), core.WithClock(clk.Now))
			if err != nil {
				t.Fatal(err)
			}
			d, err := l.Allow(context.Background(), "acme")
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed != tc.wantAllowed || d.Source != tc.wantSource || d.Rule != 0 || d.Limit != 1000 || d.Window != 23*time.Hour {
				t.Errorf("Allow with the store failing = allowed %v, source %v, rule %d, limit %d, window %v; want %v, %v, 0, 1000, 23h0m0s",
					d.Allowed, d.Source, d.Rule, d.Limit, d.Window, tc.wantAllowed, tc.wantSource)
			}
		})
	}
}
