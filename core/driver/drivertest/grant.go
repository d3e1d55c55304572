package drivertest

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/driver"
)

// testGrants: a store that implements [driver.Grants] decides a key with
// a grant of Extra units as if every limit were that much higher, exactly
// under concurrent Takes, and reports the raised limits and Extra; an
// exempt key's Takes are all allowed and record nothing; GrantOf returns
// the grant until it is revoked, and none once its Until has passed;
// another key of the policy, and the key under another policy, are not
// granted. Skipped for a store without grants.
func testGrants(t *testing.T, s *suite) {
	algorithms(t, func(t *testing.T, algo core.Algorithm) {
		st := s.newStore(t)
		gs, ok := st.(driver.Grants)
		if !ok {
			t.Skipf("%T keeps no grants", st)
		}
		q := driver.Query{Policy: s.name(), Key: "k", Rules: []driver.Rule{{Limit: 4, Window: time.Hour}, {Limit: 50, Calendar: core.Day}},
			Algorithm: driver.Algorithm(algo), Buckets: 60, N: 1, Keep: 4}
		if algo == core.SlidingLog {
			q.Rules = q.Rules[:1] // calendar rules are the same under both: once is enough
		}
		grantsExtra(t, st, gs, q)
		other := q
		other.Key = "other"
		if n := takeConcurrently(t, st, other, 8); n != 4 {
			t.Fatalf("another key: %d admitted of 8, want 4: the grant is k's own", n)
		}
		other = q
		other.Policy = s.name()
		if n := takeConcurrently(t, st, other, 8); n != 4 {
			t.Fatalf("k under another policy: %d admitted of 8, want 4", n)
		}
		grantsRevoke(t, st, gs, q)
		grantsExempt(t, st, gs, q)
	})
}

// grantsExtra is testGrants's grant of 6 more to q.Key, which GrantOf
// returns as given, and under which 32 concurrent Takes admit 10.
func grantsExtra(t *testing.T, st core.Store, gs driver.Grants, q driver.Query) {
	t.Helper()
	g := driver.Grant{Extra: 6, Until: time.Now().Add(time.Hour).Truncate(time.Millisecond), By: "ann", Note: "ticket 7"}
	if err := gs.SetGrant(ctx(t), q.Policy, q.Key, g); err != nil {
		t.Fatalf("SetGrant: %v", err)
	}
	got, ok, err := gs.GrantOf(ctx(t), q.Policy, q.Key)
	if err != nil || !ok || got.Extra != 6 || got.Exempt || !got.Until.Equal(g.Until) || got.By != "ann" || got.Note != "ticket 7" {
		t.Fatalf("GrantOf = %+v, %v, %v; want %+v", got, ok, err, g)
	}
	if _, ok, err := gs.GrantOf(ctx(t), q.Policy, "other"); ok || err != nil {
		t.Fatalf("GrantOf(other) = %v, %v; want none", ok, err)
	}
	if n := takeConcurrently(t, st, q, 32); n != 10 {
		t.Fatalf("%d concurrent Takes with 6 more than 4: %d admitted, want 10", 32, n)
	}
	res, err := st.Peek(ctx(t), q)
	if err != nil || res.Allowed || res.Extra != 6 || res.Rules.All()[0].Limit != 10 || res.Rules.All()[0].Used != 10 {
		t.Fatalf("Peek = %+v, %v; want denied, Extra 6, Limit 10, Used 10", res, err)
	}
}

// grantsRevoke is testGrants's revocation of q.Key's grant: gone, and
// the key decided by its rules again at once.
func grantsRevoke(t *testing.T, st core.Store, gs driver.Grants, q driver.Query) {
	t.Helper()
	if err := gs.SetGrant(ctx(t), q.Policy, q.Key, driver.Grant{}); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	if _, ok, err := gs.GrantOf(ctx(t), q.Policy, q.Key); ok || err != nil {
		t.Fatalf("GrantOf after revoke = %v, %v; want none", ok, err)
	}
	if res, err := st.Peek(ctx(t), q); err != nil || res.Allowed || res.Extra != 0 || res.Rules.All()[0].Limit != 4 {
		t.Fatalf("Peek after revoke = %+v, %v; want denied, Limit 4", res, err)
	}
}

// grantsExempt is testGrants's exempt key, of q's policy and rules: every
// Take is allowed and records nothing, and once the grant has ended by
// itself the key has its whole limit.
func grantsExempt(t *testing.T, st core.Store, gs driver.Grants, q driver.Query) {
	t.Helper()
	ex := q
	ex.Key = "ex"
	if err := gs.SetGrant(ctx(t), q.Policy, "ex", driver.Grant{Exempt: true, Until: time.Now().Add(300 * time.Millisecond)}); err != nil {
		t.Fatalf("SetGrant(Exempt): %v", err)
	}
	res, err := st.Take(ctx(t), ex)
	if n := takeConcurrently(t, st, ex, 16); n != 16 || err != nil || !res.Allowed || !res.Exempt || res.Rules.All()[0].Used != 0 || res.Rules.All()[0].Limit != 4 {
		t.Fatalf("exempt: %d of 16 admitted; Take = %+v, %v; want all, Exempt, Used 0, Limit 4", n, res, err)
	}
	// The grant ends by itself, and what the exempt key did counted
	// nowhere.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, ok, err := gs.GrantOf(ctx(t), q.Policy, "ex"); err != nil {
			t.Fatal(err)
		} else if !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("an exempt grant of 300 ms still there after 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := takeConcurrently(t, st, ex, 8); n != 4 {
		t.Fatalf("once the exemption ended: %d admitted of 8, want 4", n)
	}
}

// takeConcurrently sends n Takes of q at once and returns how many were
// admitted.
func takeConcurrently(t *testing.T, st core.Store, q driver.Query, n int) int {
	t.Helper()
	var ok atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			res, err := st.Take(ctx(t), q)
			if err != nil {
				t.Errorf("Take: %v", err)
			}
			if res.Allowed {
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	return int(ok.Load())
}
