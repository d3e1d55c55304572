package drivertest

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/driver"
)

// testRefusals: the store keeps refusals ([driver.Refusals]): additions to a
// policy sum per key, TopRefused returns the n highest in order (ties in
// key order) and nothing of another policy, a minute keeps its 1,000
// highest keys, and a limiter's refusals reach TopRefused with their
// bounded keys.
func testRefusals(t *testing.T, s *suite) {
	store := s.newStore(t)
	rs, ok := store.(driver.Refusals)
	if !ok {
		t.Fatalf("%T does not keep refusals (driver.Refusals)", store)
	}
	c := ctx(t)
	checkRefusedSums(t, c, s, rs)
	checkRefusedBound(t, c, s, rs)
	checkRefusedLimiter(t, c, s, store)
}

// checkRefusedSums checks that additions of refusals to a policy sum per
// key, and that TopRefused returns the n highest in order (ties in key
// order) and nothing of another policy.
func checkRefusedSums(t *testing.T, c context.Context, s *suite, rs driver.Refusals) {
	t.Helper()
	p, other := s.name(), s.name()
	for _, add := range []struct {
		policy string
		keys   []driver.RefusedKey
	}{
		{p, []driver.RefusedKey{{Key: "a", Refusals: 3}, {Key: "b", Refusals: 5}, {Key: "c", Refusals: 3}}},
		{p, []driver.RefusedKey{{Key: "a", Refusals: 4}, {Key: "d", Refusals: 1}}},
		{p, nil},
		{other, []driver.RefusedKey{{Key: "a", Refusals: 100}, {Key: "z", Refusals: 1}}},
	} {
		if err := rs.AddRefused(c, add.policy, add.keys); err != nil {
			t.Fatalf("AddRefused(%s, %v): %v", add.policy, add.keys, err)
		}
	}
	want := []driver.RefusedKey{{Key: "a", Refusals: 7}, {Key: "b", Refusals: 5}, {Key: "c", Refusals: 3}, {Key: "d", Refusals: 1}}
	for _, n := range []int{10, 4, 2, 1, 0} {
		got, err := rs.TopRefused(c, p, n)
		if err != nil {
			t.Fatalf("TopRefused(%d): %v", n, err)
		}
		if w := want[:min(n, len(want))]; len(got) != len(w) || len(w) > 0 && !reflect.DeepEqual(got, w) {
			t.Errorf("TopRefused(%d) = %v, want %v", n, got, w)
		}
	}
	if got, err := rs.TopRefused(c, s.name(), 10); err != nil || len(got) != 0 {
		t.Errorf("TopRefused of a policy that refused nothing = %v, %v; want none", got, err)
	}
}

// checkRefusedBound checks that a minute keeps its 1,000 highest keys,
// from one addition of 1,500.
func checkRefusedBound(t *testing.T, c context.Context, s *suite, rs driver.Refusals) {
	t.Helper()
	bound := s.name()
	many := make([]driver.RefusedKey, 1500)
	for i := range many {
		many[i] = driver.RefusedKey{Key: fmt.Sprintf("k%04d", i), Refusals: int64(i + 1)}
	}
	if err := rs.AddRefused(c, bound, many); err != nil {
		t.Fatal(err)
	}
	got, err := rs.TopRefused(c, bound, 5000)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1000 || got[0] != many[1499] || got[999] != many[500] {
		t.Errorf("TopRefused after 1,500 keys in a minute: %d keys, first %v, last %v; want the 1,000 highest, %v to %v",
			len(got), got[:min(1, len(got))], got[max(0, len(got)-1):], many[1499], many[500])
	}
}

// checkRefusedLimiter checks that a limiter's denials on store reach its
// TopRefused, by key as stored (bounded).
func checkRefusedLimiter(t *testing.T, c context.Context, s *suite, store core.Store) {
	t.Helper()
	long := strings.Repeat("x", 300)
	l, err := core.NewLimiter(store, core.Policy{Name: s.name(), Rules: []core.Rule{{Limit: 1, Window: time.Hour}}}, s.options()...)
	if err != nil {
		t.Fatal(err)
	}
	for key, n := range map[string]int{"alice": 4, "bob": 2, long: 3, "carol": 1} {
		for range n {
			allow(t, l, key)
		}
	}
	top, err := l.TopRefused(c, 10)
	if err != nil {
		t.Fatal(err)
	}
	wantTop := []core.RefusedKey{{Key: "alice", Refusals: 3}, {Key: driver.BoundKey(long), Refusals: 2}, {Key: "bob", Refusals: 1}}
	if !reflect.DeepEqual(top, wantTop) {
		t.Errorf("Limiter.TopRefused = %v, want %v", top, wantTop)
	}
}
