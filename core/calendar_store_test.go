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
	paris, tokyo := drivertest.Zone(t, "Europe/Paris"), drivertest.Zone(t, "Asia/Tokyo")
	// 20:00 UTC on 31 January: 21:00 in Paris, already 1 February in Tokyo.
	clk := drivertest.NewClock(time.Date(2024, 1, 31, 20, 0, 0, 0, time.UTC))
	p := testkit.NewPlans(map[string]string{"fr": "pro/Europe/Paris", "jp": "pro/Asia/Tokyo"})
	tiers := map[string][]core.Rule{
		"pro/Europe/Paris": {{Limit: 100, Window: time.Second}, {Limit: 1000, Calendar: core.Month, Location: paris}},
		"pro/Asia/Tokyo":   {{Limit: 100, Window: time.Second}, {Limit: 1000, Calendar: core.Month, Location: tokyo}},
	}
	base := core.Policy{Name: "api", Rules: []core.Rule{{Limit: 10, Window: time.Second}, {Limit: 100, Calendar: core.Month}}}
	for _, store := range []struct {
		name string
		s    core.Store
	}{{"memory", core.NewMemoryStore()}} { // Redis: internal/test/redissuite's CalendarTiers
		t.Run(store.name, func(t *testing.T) {
			l := testkit.Limiter(t, store.s, base, core.WithTiers(p.Resolve, tiers), core.WithClock(clk.Now), core.WithTimeout(2*time.Second))
			for _, tc := range []struct {
				key    string
				limit  int64
				window time.Duration
				reset  time.Duration
			}{
				{"fr", 1000, 31 * 24 * time.Hour, 3 * time.Hour},   // January in Paris ends at 23:00 UTC
				{"jp", 1000, 29 * 24 * time.Hour, 691 * time.Hour}, // February 2024 in Tokyo ends on 29 February, 15:00 UTC
				{"other", 100, 31 * 24 * time.Hour, 4 * time.Hour}, // the policy's own: January in UTC
			} {
				d, err := l.Allow(context.Background(), tc.key)
				if err != nil || !d.Allowed {
					t.Fatalf("Allow(%s) = %+v, %v", tc.key, d, err)
				}
				r := d.Rules()[1]
				if r.Limit != tc.limit || r.Window != tc.window || r.ResetAfter != tc.reset || r.Used != 1 {
					t.Errorf("Allow(%s): Rules[1] = %+v, want Limit %d, Window %v, ResetAfter %v, Used 1", tc.key, r, tc.limit, tc.window, tc.reset)
				}
			}
		})
	}

	// A tier must keep the policy's periods.
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
	noon := drivertest.ZoneWithMidnightAt(time.Now().Truncate(time.Second).Add(12 * time.Hour))
	// Redis: internal/test/redissuite's CalendarShards.
	for _, store := range []core.Store{core.NewMemoryStore()} {
		l := testkit.Limiter(t, store, core.Policy{Name: "global", Shards: 4,
			Rules: []core.Rule{{Limit: 1000, Window: time.Minute}, {Limit: 30, Calendar: core.Day, Location: noon}}},
			core.WithTimeout(2*time.Second))
		allowed := 0
		for range 60 {
			d, err := l.Allow(context.Background(), "all")
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				allowed++
			}
		}
		if allowed != 30 {
			t.Errorf("%T: 60 Allow with 30 a day over 4 shards: %d allowed, want 30", store, allowed)
		}
	}
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
