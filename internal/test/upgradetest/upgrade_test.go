package upgradetest_test

import (
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/upgradetest"
)

// previous, when set, is a commit to run beside the working tree instead of
// the previous release: to see what a change that skipped the upgrade
// path would do, run the tests beside the commit before it.
var previous = flag.String("upgrade.previous", "", "a commit of this repository to run beside the working tree instead of "+upgradetest.Previous.Name)

func TestMain(m *testing.M) {
	flag.Parse()
	if *previous != "" {
		upgradetest.Previous = upgradetest.Release{Name: *previous, Commit: *previous}
	}
	code := m.Run()
	upgradetest.Cleanup()
	os.Exit(code)
}

// A deploy is the instances of one scenario, on one Redis: the previous
// release's and the working tree's, deciding at the limiters' clock,
// which the test moves.
type deploy struct {
	t        *testing.T
	srv      *redistest.Server
	old, new *upgradetest.Agent
	now      time.Time
}

// day is a morning of the scenarios' clock: a calendar day has hours to go.
var day = time.Date(2031, time.March, 14, 9, 0, 0, 0, time.UTC)

func newDeploy(t *testing.T) *deploy {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the previous release")
	}
	oldBin, newBin := upgradetest.Build(t, upgradetest.Previous), upgradetest.Build(t, upgradetest.Release{})
	d := &deploy{t: t, srv: redistest.Start(t), now: day}
	d.old = upgradetest.Start(t, oldBin, upgradetest.Previous.Name)
	d.new = upgradetest.Start(t, newBin, "working tree")
	return d
}

// both builds the limiter name of p on both instances.
func (d *deploy) both(name string, p map[string]any, extra ...map[string]any) {
	d.t.Helper()
	for _, a := range []*upgradetest.Agent{d.old, d.new} {
		r := upgradetest.Request{"op": "limiter", "name": name, "addr": d.srv.Addr(), "policy": p}
		for _, e := range extra {
			for k, v := range e {
				r[k] = v
			}
		}
		a.Do(d.t, r)
	}
}

// allow decides one unit of key on a's limiter name now; it fails the
// test on a decision the store did not make (nor its denial cached).
func (d *deploy) allow(a *upgradetest.Agent, name, key string) upgradetest.Answer {
	d.t.Helper()
	ans := a.Do(d.t, upgradetest.Request{"op": "allow", "name": name, "key": key, "now": d.now.UnixMicro()})
	if ans.Source != "store" && ans.Source != "cache" {
		d.t.Fatalf("%s: Allow(%s) decided by %q, want the store", a.Name, key, ans.Source)
	}
	return ans
}

// admit decides n units one at a time, taking turns on the instances
// as given, and returns how many were admitted.
func (d *deploy) admit(name, key string, n int, as ...*upgradetest.Agent) int {
	d.t.Helper()
	got := 0
	for i := range n {
		if d.allow(as[i%len(as)], name, key).Allowed {
			got++
		}
	}
	return got
}

func (d *deploy) advance(by time.Duration) { d.now = d.now.Add(by) }

func (d *deploy) want(what string, got, want int) {
	d.t.Helper()
	if got != want {
		d.t.Errorf("%s: %d admitted, want %d", what, got, want)
	}
}

// The orders of a scenario: the previous release and the working tree
// taking turns (instances of both live at once), the previous release
// first (a rolling deploy), the working tree first (a rollback).
var orders = []struct {
	name  string
	pick  func(d *deploy) (first, then *upgradetest.Agent)
	turns bool
}{
	{"concurrent", func(d *deploy) (*upgradetest.Agent, *upgradetest.Agent) { return d.old, d.new }, true},
	{"forward", func(d *deploy) (*upgradetest.Agent, *upgradetest.Agent) { return d.old, d.new }, false},
	{"rollback", func(d *deploy) (*upgradetest.Agent, *upgradetest.Agent) { return d.new, d.old }, false},
}

func rule(limit int64, window time.Duration) map[string]any {
	return map[string]any{"limit": limit, "window_ms": window.Milliseconds()}
}

// TestUpgradeWindows: a sliding log and sliding buckets of 10 a minute
// admit 10 between both releases, whichever decides.
func TestUpgradeWindows(t *testing.T) {
	for _, buckets := range []bool{false, true} {
		for _, o := range orders {
			t.Run(fmt.Sprintf("buckets=%v/%s", buckets, o.name), func(t *testing.T) {
				t.Parallel()
				d := newDeploy(t)
				d.both("w", map[string]any{"name": "w", "buckets": buckets, "rules": []any{rule(10, time.Minute)}})
				first, then := o.pick(d)
				if o.turns {
					d.want("taking turns", d.admit("w", "k", 20, first, then), 10)
					return
				}
				d.want("first release", d.admit("w", "k", 6, first), 6)
				d.want("the other release after it", d.admit("w", "k", 10, then), 4)
				d.advance(61 * time.Second)
				d.want("a minute on, the other release", d.admit("w", "k", 12, then), 10)
			})
		}
	}
}

// TestUpgradeLockout: a lockout (5 a minute, then locked out for a
// minute, twice as long on a repeat) set by one release holds on the
// other, and so does its escalation, on both algorithms.
func TestUpgradeLockout(t *testing.T) {
	for _, buckets := range []bool{false, true} {
		for _, o := range orders {
			t.Run(fmt.Sprintf("buckets=%v/%s", buckets, o.name), func(t *testing.T) {
				t.Parallel()
				d := newDeploy(t)
				d.both("l", map[string]any{"name": "l", "buckets": buckets, "rules": []any{rule(5, time.Minute)},
					"lock_for_ms": time.Minute.Milliseconds(), "lock_max_ms": (4 * time.Minute).Milliseconds()})
				first, then := o.pick(d)
				if o.turns {
					d.want("taking turns", d.admit("l", "k", 10, first, then), 5)
				} else {
					d.want("first release", d.admit("l", "k", 6, first), 5) // the 6th locks the key out
					d.want("locked out, the other release", d.admit("l", "k", 4, then), 0)
				}
				for _, a := range []*upgradetest.Agent{first, then} {
					if ans := d.allow(a, "l", "k"); ans.Allowed || !ans.Locked {
						t.Errorf("%s: Allow during the lockout = %+v, want denied, Locked", a.Name, ans)
					}
				}
				// The lockout ends; the window has passed: 5 again, then a
				// lockout of two minutes (the second offence).
				d.advance(61 * time.Second)
				d.want("after the lockout", d.admit("l", "k", 6, then, first), 5)
				d.advance(90 * time.Second)
				for _, a := range []*upgradetest.Agent{first, then} {
					if ans := d.allow(a, "l", "k"); ans.Allowed || !ans.Locked {
						t.Errorf("%s: Allow 90 s into the second lockout = %+v, want denied, Locked (2 minutes)", a.Name, ans)
					}
				}
			})
		}
	}
}

// TestUpgradeCalendar: a daily quota of 10 admits 10 in the day between
// both releases.
func TestUpgradeCalendar(t *testing.T) {
	for _, o := range orders {
		t.Run(o.name, func(t *testing.T) {
			t.Parallel()
			d := newDeploy(t)
			d.both("q", map[string]any{"name": "q", "rules": []any{map[string]any{"limit": 10, "calendar": "day"}}})
			first, then := o.pick(d)
			if o.turns {
				d.want("taking turns", d.admit("q", "k", 20, first, then), 10)
				return
			}
			d.want("first release", d.admit("q", "k", 8, first), 8)
			d.advance(time.Hour)
			d.want("an hour on, the other release", d.admit("q", "k", 10, then), 2)
			d.advance(16 * time.Hour) // the next day
			d.want("the next day, the other release", d.admit("q", "k", 12, then), 10)
		})
	}
}

// TestUpgradeChallenge: a challenge at 3 of 5 an hour, passed on one
// release, holds on the other.
func TestUpgradeChallenge(t *testing.T) {
	for _, o := range orders {
		t.Run(o.name, func(t *testing.T) {
			t.Parallel()
			d := newDeploy(t)
			d.both("c", map[string]any{"name": "c", "rules": []any{map[string]any{"limit": 5, "window_ms": time.Hour.Milliseconds(), "challenge": 3}}})
			first, then := o.pick(d)
			d.want("before the challenge", d.admit("c", "k", 2, first), 2)
			if ans := d.allow(then, "c", "k"); ans.Allowed || !ans.Challenged {
				t.Errorf("%s: the third request = %+v, want challenged", then.Name, ans)
			}
			first.Do(t, upgradetest.Request{"op": "pass", "name": "c", "key": "k", "now": d.now.UnixMicro()})
			d.want("after a pass on the first release", d.admit("c", "k", 5, then, first), 3)
		})
	}
}

// TestUpgradeLeases: a concurrency limit of 3 counts the leases of both
// releases, and a release by one frees a unit for the other.
func TestUpgradeLeases(t *testing.T) {
	for _, o := range orders {
		t.Run(o.name, func(t *testing.T) {
			t.Parallel()
			d := newDeploy(t)
			d.both("f", map[string]any{"name": "f", "in_flight": 3})
			first, then := o.pick(d)
			a1, a2 := d.allow(first, "f", "k"), d.allow(first, "f", "k")
			if !a1.Allowed || !a2.Allowed {
				t.Fatalf("%s: two leases = %+v, %+v; want both", first.Name, a1, a2)
			}
			d.want("the other release beside 2 leases", d.admit("f", "k", 2, then), 1)
			first.Do(t, upgradetest.Request{"op": "refund", "ticket": a1.Ticket})
			d.want("once the first release released one", d.admit("f", "k", 2, then), 1)
		})
	}
}

// TestUpgradeRefunds: units refunded by one release are free on the
// other, on both algorithms: the refund of a key the other release
// decided too.
func TestUpgradeRefunds(t *testing.T) {
	for _, buckets := range []bool{false, true} {
		for _, o := range orders {
			t.Run(fmt.Sprintf("buckets=%v/%s", buckets, o.name), func(t *testing.T) {
				t.Parallel()
				d := newDeploy(t)
				d.both("r", map[string]any{"name": "r", "buckets": buckets, "rules": []any{rule(10, time.Minute)}})
				first, then := o.pick(d)
				d.want("first release", d.admit("r", "k", 3, first), 3)
				var tickets []int
				for range 4 {
					ans := d.allow(then, "r", "k")
					if !ans.Allowed {
						t.Fatalf("%s: Allow = %+v, want admitted", then.Name, ans)
					}
					tickets = append(tickets, ans.Ticket)
				}
				for _, tk := range tickets[:3] { // count only failures: 3 succeeded
					then.Do(t, upgradetest.Request{"op": "refund", "ticket": tk})
				}
				if ans := first.Do(t, upgradetest.Request{"op": "peek", "name": "r", "key": "k", "now": d.now.UnixMicro()}); ans.Remaining != 6 {
					t.Errorf("%s: Peek after the other release's refunds = %+v, want 6 remaining", first.Name, ans)
				}
				d.want("the rest, taking turns", d.admit("r", "k", 10, first, then), 6)
			})
		}
	}
}

// TestUpgradeReset: a reset by one release lifts the lockout and the
// counts the other release set.
func TestUpgradeReset(t *testing.T) {
	for _, o := range orders {
		t.Run(o.name, func(t *testing.T) {
			t.Parallel()
			d := newDeploy(t)
			d.both("x", map[string]any{"name": "x", "rules": []any{rule(3, time.Hour), map[string]any{"limit": 5, "calendar": "day"}},
				"lock_for_ms": time.Hour.Milliseconds()})
			first, then := o.pick(d)
			d.want("the first release locks the key out", d.admit("x", "k", 4, first), 3)
			// A marker the first release denies from its deny cache, reset
			// after the key: resets reach an instance in order, so once it
			// hears the marker's it has heard the key's.
			d.want("the first release locks the marker out", d.admit("x", "marker", 4, first), 3)
			for _, key := range []string{"k", "marker"} {
				then.Do(t, upgradetest.Request{"op": "reset", "name": "x", "key": key, "now": d.now.UnixMicro()})
			}
			deadline := time.Now().Add(10 * time.Second)
			for d.allow(first, "x", "marker").Source == "cache" {
				if time.Now().After(deadline) {
					t.Fatalf("%s never heard the other release's resets", first.Name)
				}
				time.Sleep(10 * time.Millisecond)
			}
			d.want("after the other release's reset, on the first", d.admit("x", "k", 4, first), 3)
		})
	}
}

// TestUpgradeTiers: a plan's limit holds between both releases.
func TestUpgradeTiers(t *testing.T) {
	for _, o := range orders {
		t.Run(o.name, func(t *testing.T) {
			t.Parallel()
			d := newDeploy(t)
			d.both("t", map[string]any{"name": "t", "rules": []any{rule(3, time.Minute)}},
				map[string]any{"tiers": map[string]any{"free": []any{rule(3, time.Minute)}, "pro": []any{rule(6, time.Minute)}},
					"tier_of": map[string]string{"alice": "pro", "bob": "free"}})
			first, then := o.pick(d)
			if o.turns {
				d.want("pro, taking turns", d.admit("t", "alice", 12, first, then), 6)
				d.want("free, taking turns", d.admit("t", "bob", 6, first, then), 3)
				return
			}
			d.want("pro on the first release", d.admit("t", "alice", 4, first), 4)
			d.want("pro on the other", d.admit("t", "alice", 4, then), 2)
		})
	}
}
