// Package tryagain checks a Redis driver's flight against a migrating Cluster
// slot, from the driver's internal tests (it needs the flight and the key
// prefix, which the driver does not export).
package tryagain

import (
	"context"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/internal/redislib"
	"github.com/ratekit/ratekit/internal/test/redistest"
)

// Split checks a Redis driver's flight against a migrating
// Cluster slot: a flight of two takes of one slot, one key on the source
// node and one not there, while the slot is open for migration
// (IMPORTING, MIGRATING) and nothing has moved yet. Their script call of
// two keys is refused with TRYAGAIN, and each take must be sent again at
// once in a call of its own, the missing key's following ASK to the
// importing node: both admitted, each counted once, and still counted
// after the slot has moved. s is the driver's store on c, prefix its key
// prefix and flight its flight of calls.
func Split(t *testing.T, c *redistest.Cluster, s core.Store, prefix string, flight func(context.Context, []*redislib.Call)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	slot := redistest.Slot("split")
	keys := redistest.KeysWhere(2, "s", func(s int) bool { return s == slot })
	query := func(key string) driver.Query {
		return driver.Query{Policy: "split", Key: key, N: 1, Keep: 10, Rules: []driver.Rule{{Limit: 10, Window: time.Minute}}}
	}
	if _, err := s.Take(ctx, query(keys[0])); err != nil {
		t.Fatal(err)
	}
	from := c.SlotOwner(slot)
	c.MigrateSlot(slot, from, (from+1)%3, redistest.MigrateOpened(func() {
		calls := make([]*redislib.Call, 2)
		for i, k := range keys {
			calls[i] = redislib.Get()
			q := query(k)
			if err := calls[i].Decision(prefix, &q, redislib.OpTake, 0, time.Now().UnixMicro(), true, nil); err != nil {
				t.Fatal(err)
			}
		}
		flight(ctx, calls)
		for i, want := range []int64{2, 1} {
			if calls[i].Err != nil || !calls[i].Allowed || calls[i].Rules.All()[0].Used != want {
				t.Errorf("take of %s in the open slot: Allowed %v, Used %v, %v; want admitted, Used %d",
					keys[i], calls[i].Allowed, calls[i].Rules.All(), calls[i].Err, want)
			}
		}
	}))
	for i, want := range []int64{2, 1} {
		r, err := s.Peek(ctx, query(keys[i]))
		if err != nil || r.Rules.All()[0].Used != want {
			t.Errorf("Peek(%s) after the migration = %+v, %v; want Used %d (counted once)", keys[i], r, err, want)
		}
	}
}
