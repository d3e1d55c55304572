package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/driver/drivertest"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/redisstore"
)

// TestLockoutAndCalendar: peek shows a lockout and calendar usage; reset
// deletes every Redis key of the key and lifts the lockout on the app's
// instances, deny caches included.
func TestLockoutAndCalendar(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr() + "/0"
	ctx := context.Background()
	store := redisstore.New(srv.Client(t))
	// The app's limiter, with a deny cache.
	login := testkit.Limiter(t, store, core.Policy{Name: "login-ip", Rules: []core.Rule{{Limit: 2, Window: time.Minute}},
		Lockout: core.Lockout{For: 24 * time.Hour}}, core.WithTimeout(2*time.Second))
	for range 3 {
		if _, err := login.Allow(ctx, "192.0.2.1"); err != nil {
			t.Fatal(err)
		}
	}
	api := testkit.Limiter(t, store, core.Policy{Name: "api", Rules: []core.Rule{{Limit: 10, Window: time.Second},
		{Limit: 1_000_000, Calendar: core.Month, Location: drivertest.Zone(t, "Europe/Paris")}}}, appOptions...)
	if _, err := api.AllowN(ctx, "app-42", 7); err != nil {
		t.Fatal(err)
	}

	// peek finds the lockout by itself: the app's Retry-After, without
	// the policy's lockout restated.
	args := []string{"peek", "-policy", "login-ip", "-rules", "2/1m", "192.0.2.1"}
	code, stdout, _ := exec(t, url, args...)
	want(t, args, code, 0, stdout, "a request now: denied, locked out until ", "(retry after 24h0m0s)", "rule 2/1m0s: used 2, remaining 0",
		"lockout: until ", "offence 1")
	until, err := time.Parse(time.RFC3339, strings.Fields(stdout[strings.Index(stdout, "locked out until ")+len("locked out until "):])[0])
	if err != nil || until.Before(time.Now().Add(24*time.Hour-5*time.Second)) || until.After(time.Now().Add(24*time.Hour)) {
		t.Errorf("locked out until %v (%v), want a day from now", until, err)
	}
	// And without the rules at all: what the store holds settles it.
	args = []string{"peek", "-policy", "login-ip", "192.0.2.1"}
	code, stdout, _ = exec(t, url, args...)
	want(t, args, code, 0, stdout, "sliding log: 2 units, admitted from ", "a request now: denied, locked out until ", "(retry after 24h0m0s)")

	args = []string{"peek", "-json", "-policy", "login-ip", "192.0.2.1"}
	code, stdout, stderr := exec(t, url, args...)
	want(t, args, code, 0, stderr)
	var got peekJSON
	if err := json.Unmarshal([]byte(stdout), &got); err != nil || got.LockedUntil == "" || got.Allowed == nil || *got.Allowed ||
		got.Held.Offences != 1 || len(got.Held.SlidingLog) != 2 {
		t.Errorf("peek -json = %s (%v), want allowed false, locked_until, 1 offence and 2 admissions held", stdout, err)
	}

	args = []string{"peek", "-policy", "api", "-rules", "10/1s,1000000/month@Europe/Paris", "app-42"}
	code, stdout, _ = exec(t, url, args...)
	want(t, args, code, 0, stdout, "a request now: allowed", "rule 1000000/month@Europe/Paris: used 7, remaining 999993, period ends in ")
	// The calendar period and its count, without the rules.
	args = []string{"peek", "-policy", "api", "app-42"}
	code, stdout, _ = exec(t, url, args...)
	want(t, args, code, 0, stdout, "calendar month ", ": 7 units", "sliding log: 7 units",
		"a request now: allowed unless a rule is full; -rules")

	args = []string{"policies"}
	code, stdout, _ = exec(t, url, args...)
	want(t, args, code, 0, stdout,
		"POLICY                     SLIDINGLOG      BUCKETS  LOCKOUT+CAL     INFLIGHT\n",
		"api                                 0            0            1            0\n",
		"login-ip                            0            0            1            0\n")
	if strings.Contains(stdout, "earlier versions") {
		t.Errorf("policies speaks of earlier versions' keys, and there are none:\n%s", stdout)
	}

	// The app caches the lockout; the CLI's reset reaches it.
	deadline := time.Now().Add(time.Second)
	for d, _ := login.Allow(ctx, "192.0.2.1"); d.Source != core.SourceCache; d, _ = login.Allow(ctx, "192.0.2.1") {
		if time.Now().After(deadline) {
			t.Fatal("the app never cached the lockout")
		}
		time.Sleep(2 * time.Millisecond)
	}
	args = []string{"reset", "-policy", "login-ip", "192.0.2.1"}
	code, stdout, _ = exec(t, url, args...)
	want(t, args, code, 0, stdout, `reset login-ip "192.0.2.1": deleted 1 Redis key`)
	deadline = time.Now().Add(time.Second)
	for d, _ := login.Allow(ctx, "192.0.2.1"); !d.Allowed; d, _ = login.Allow(ctx, "192.0.2.1") {
		if time.Now().After(deadline) {
			t.Fatalf("the app still refuses the key a second after the reset: %+v", d)
		}
		time.Sleep(2 * time.Millisecond)
	}
	args = []string{"reset", "-policy", "api", "app-42"}
	code, stdout, _ = exec(t, url, args...)
	want(t, args, code, 0, stdout, `reset api "app-42": deleted 1 Redis key`)

	for _, bad := range []string{"5/month@Nowhere/City", "5/month@", "5/month@Local", "5/fortnight"} {
		args = []string{"peek", "-policy", "api", "-rules", bad, "k"}
		code, _, stderr = exec(t, url, args...)
		want(t, args, code, 2, stderr, bad)
	}
}
