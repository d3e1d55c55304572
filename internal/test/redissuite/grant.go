package redissuite

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redislib"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// testClusterGrantMigrating: while a key's slot migrates and its grant
// has moved to the importing node before its counts, a decision on the
// migrating node reads the grant as none (the rules' own limit, never
// more) instead of failing; once the slot has moved, the grant holds.
func testClusterGrantMigrating(t *testing.T, e *clusterEnv) {
	ctx := context.Background()
	c := e.c.For(t)
	slot := redistest.Slot("grant-migrating")
	key := keysInSlot(slot, 1, "g")[0]
	from := c.SlotOwner(slot)
	to := (from + 1) % 3
	const prefix = "gm"
	l := testkit.Limiter(t, e.store(t, prefix, 1), core.Policy{Name: "gm", Rules: []core.Rule{{Limit: 2, Window: time.Hour}}},
		core.WithTimeout(2*time.Second), core.WithFailurePolicy(core.FailClosed), core.WithDenyCache(0))
	allow := func(what string, want bool) {
		t.Helper()
		d, err := l.Allow(ctx, key)
		if err != nil || d.Source != core.SourceStore || d.Allowed != want {
			t.Fatalf("%s: Allow = %+v, %v; want allowed %v by the store", what, d, err, want)
		}
	}
	allow("1st", true)
	allow("2nd", true)
	if err := l.Grant(ctx, key, core.Grant{Extra: 3, Until: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}

	src, dst := c.Node(from).Client(t), c.Node(to).Client(t)
	if err := dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", c.ID(from)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", c.ID(to)).Err(); err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(c.Node(to).Addr())
	if err := src.Do(ctx, "MIGRATE", host, port, redislib.GrantKey(prefix, "gm", key), 0, 10000).Err(); err != nil {
		t.Fatal(err)
	}
	allow("with the grant moved ahead of the counts", false)

	c.MigrateSlot(slot, from, to)
	allow("3rd, granted, once the slot moved", true)
	allow("4th", true)
	allow("5th", true)
	allow("6th", false)
}
