package testkit

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
)

// GrantFleet checks grants ([core.Limiter.Grant]) on b, on two instances
// sharing a store (on [Memory], the one limiter of a process), for a
// sliding log, sliding buckets and a policy with a lockout and a calendar
// rule: a key that used its limit of 5 is granted 10 more on one
// instance, and a flood over both then admits exactly 10; a Peek on the
// other instance shows the grant at once; a revocation on the other
// holds at once; an exempt key admits a whole flood and counts none of
// it; a grant expires by itself; keys on the Allow or Deny list take no
// grant and are decided by the list.
func GrantFleet(t *testing.T, b Backend) {
	policies := []core.Policy{
		{Name: "grant-log", Rules: []core.Rule{{Limit: 5, Window: time.Hour}}},
		{Name: "grant-buckets", Algorithm: core.SlidingBuckets, Rules: []core.Rule{{Limit: 5, Window: time.Hour}}},
		{Name: "grant-more", Lockout: core.Lockout{For: time.Minute}, Rules: []core.Rule{{Limit: 5, Window: time.Hour}, {Limit: 100, Calendar: core.Day}}},
	}
	for _, p := range policies {
		t.Run(p.Name, func(t *testing.T) {
			p.Allow, p.Deny = []string{"10.0.0.0/8", "trusted"}, []string{"2001:db8::/32", "banned"}
			ls := Fleet(t, 2, b, p)
			grantExtra(t, ls)
			grantExempt(t, ls)
			grantExpires(t, ls)
			grantListed(t, ls)
		})
	}
}

const (
	grantGoroutines = 8
	grantEach       = 4
)

// admit admits n units of key one at a time over ls, failing on any
// other answer.
func admit(t *testing.T, ls []*core.Limiter, key string, n int) {
	t.Helper()
	for i := range n {
		if d, err := ls[i%len(ls)].Allow(context.Background(), key); err != nil || !d.Allowed {
			t.Fatalf("Allow(%q) #%d = %+v, %v; want admitted", key, i+1, d, err)
		}
	}
}

func grantExtra(t *testing.T, ls []*core.Limiter) {
	ctx := context.Background()
	admit(t, ls, "acme", 5)
	until := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	g := core.Grant{Extra: 10, Until: until, By: "support:ann", Note: "ticket 42"}
	if err := ls[0].Grant(ctx, "acme", g); err != nil {
		t.Fatalf("Grant(acme, %+v): %v", g, err)
	}
	d, err := ls[1].Peek(ctx, "acme")
	if err != nil || d.Grant == nil || *d.Grant != g || d.Limit != 15 || d.Remaining != 10 {
		t.Fatalf("other instance: Peek(acme) after Grant = %+v (grant %+v), %v; want the grant, Limit 15, Remaining 10", d, d.Grant, err)
	}
	o := flood(t, ls, "acme", grantGoroutines, grantEach)
	if o.allowed.Load() != 10 || o.denied.Load() != grantGoroutines*grantEach-10 {
		t.Fatalf("flood of %d after a grant of 10 more: %d allowed, %d denied; want 10, %d",
			grantGoroutines*grantEach, o.allowed.Load(), o.denied.Load(), grantGoroutines*grantEach-10)
	}
	if err := ls[1].Grant(ctx, "acme", core.Grant{By: "support:bob"}); err != nil {
		t.Fatalf("revoke on the other instance: %v", err)
	}
	d, err = ls[0].Peek(ctx, "acme")
	if err != nil || d.Grant != nil || d.Limit != 5 || d.Allowed {
		t.Fatalf("Peek(acme) after the revocation = %+v (grant %+v), %v; want no grant, Limit 5, denied", d, d.Grant, err)
	}
}

func grantExempt(t *testing.T, ls []*core.Limiter) {
	ctx := context.Background()
	admit(t, ls, "ops", 2)
	if err := ls[1].Grant(ctx, "ops", core.Grant{Exempt: true, Until: time.Now().Add(time.Hour), By: "oncall"}); err != nil {
		t.Fatalf("Grant(ops, Exempt): %v", err)
	}
	o := flood(t, ls, "ops", grantGoroutines, grantEach)
	if o.allowed.Load() != grantGoroutines*grantEach {
		t.Fatalf("flood of %d while exempt: %d allowed, %d denied; want every one", grantGoroutines*grantEach, o.allowed.Load(), o.denied.Load())
	}
	d, err := ls[0].Peek(ctx, "ops")
	if err != nil || d.Grant == nil || !d.Grant.Exempt || !d.Allowed || d.Remaining != 5 {
		t.Fatalf("Peek(ops) while exempt = %+v (grant %+v), %v; want the grant, allowed, Remaining 5", d, d.Grant, err)
	}
	if err := ls[0].Grant(ctx, "ops", core.Grant{}); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	// What the exempt key did counted nowhere: the 2 before it count.
	o = flood(t, ls, "ops", grantGoroutines, grantEach)
	if o.allowed.Load() != 3 {
		t.Fatalf("flood of %d after the exemption ended: %d allowed; want 3", grantGoroutines*grantEach, o.allowed.Load())
	}
}

func grantExpires(t *testing.T, ls []*core.Limiter) {
	ctx := context.Background()
	admit(t, ls, "brief", 5)
	if err := ls[0].Grant(ctx, "brief", core.Grant{Extra: 3, Until: time.Now().Add(300 * time.Millisecond)}); err != nil {
		t.Fatalf("Grant(brief): %v", err)
	}
	if d, err := ls[1].Peek(ctx, "brief"); err != nil || !d.Allowed {
		t.Fatalf("Peek(brief) while granted = %+v, %v; want room", d, err)
	}
	WaitUntil(t, "the grant expires", func() bool {
		d, err := ls[1].Peek(ctx, "brief")
		return err == nil && d.Grant == nil
	})
	for i, l := range ls {
		if d, err := l.Peek(ctx, "brief"); err != nil || d.Allowed || d.Limit != 5 {
			t.Fatalf("instance %d: Peek(brief) once the grant expired = %+v, %v; want denied, Limit 5", i, d, err)
		}
	}
}

func grantListed(t *testing.T, ls []*core.Limiter) {
	ctx := context.Background()
	g := core.Grant{Extra: 1, Until: time.Now().Add(time.Hour)}
	for _, tc := range []struct{ key, list string }{
		{"10.1.2.3", "Allow"}, {"trusted", "Allow"}, {"2001:db8:1:2::/64", "Deny"}, {"banned", "Deny"},
	} {
		err := ls[0].Grant(ctx, tc.key, g)
		if err == nil || !strings.Contains(err.Error(), tc.list+" list") {
			t.Errorf("Grant(%q) = %v, want an error naming the %s list", tc.key, err, tc.list)
		}
		for range 7 { // past the limit: the list decides, not the rules
			d, err := ls[1].Allow(ctx, tc.key)
			if err != nil || !d.Listed || d.Allowed != (tc.list == "Allow") {
				t.Fatalf("Allow(%q) = %+v, %v; want decided by the %s list", tc.key, d, err, tc.list)
			}
			if !d.Allowed && d.RetryAfter != time.Hour {
				t.Fatalf("Allow(%q) = %+v; want RetryAfter 1h", tc.key, d)
			}
		}
	}
}
