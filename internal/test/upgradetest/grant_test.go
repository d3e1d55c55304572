package upgradetest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redislib"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/redisstore"
)

// TestUpgradeGrant: the previous release reads no grants, so a grant is
// refused while one of its instances uses the policy (it would admit the
// key by the rules alone); once it stops, the grant is given and holds on
// every instance of the working tree: the agent's, and this process's.
func TestUpgradeGrant(t *testing.T) {
	d := newDeploy(t)
	p := core.Policy{Name: "g", Rules: []core.Rule{{Limit: 3, Window: time.Hour}}}
	d.both("g", map[string]any{"name": "g", "rules": []any{rule(3, time.Hour)}})
	here := testkit.Limiter(t, redisstore.New(d.srv.Client(t)), p)
	ctx := context.Background()
	// The previous release announces itself in the background: wait for
	// its announcement (a member without a format).
	rdb := d.srv.Client(t)
	testkit.WaitUntil(t, "the previous release announces the policy", func() bool {
		members, err := rdb.ZRange(ctx, redislib.FleetKey(redislib.DefaultPrefix, "g"), 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range members {
			if !strings.Contains(m, "|") {
				return true
			}
		}
		return false
	})
	g := core.Grant{Extra: 4, Until: time.Now().Add(time.Hour), By: "upgradetest"}
	err := here.Grant(ctx, "k", g)
	if !errors.Is(err, redislib.ErrOlderInstance) || !strings.Contains(err.Error(), `policy "g"`) {
		t.Fatalf("Grant while %s runs = %v, want refused: an older instance uses the policy", d.old.Name, err)
	}
	d.want("the refused grant, on the previous release", d.admit("g", "k", 5, d.old), 3)

	d.old.Stop()
	// Its announcement ends within the fleet's TTL.
	deadline := time.Now().Add(4 * redislib.FleetTTL)
	for err = here.Grant(ctx, "k", g); err != nil; err = here.Grant(ctx, "k", g) {
		if !errors.Is(err, redislib.ErrOlderInstance) || time.Now().After(deadline) {
			t.Fatalf("Grant once %s stopped = %v, want granted", d.old.Name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	got := d.admit("g", "k", 3, d.new)
	for range 3 {
		if dec, err := here.Allow(ctx, "k"); err != nil {
			t.Fatal(err)
		} else if dec.Allowed {
			got++
		}
	}
	d.want("4 more, between the working tree's instances", got, 4)
}
