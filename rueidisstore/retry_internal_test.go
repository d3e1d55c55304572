package rueidisstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redislib"
	"github.com/ratekit/ratekit/internal/redistest"
)

// TestRetrySendsOnlyTheRefused: a flight of a decision (FCALL of the
// library) and a lease (EVALSHA) meets a server whose script cache was
// flushed, then one whose functions were: the refused call is sent again
// (with the script's source, or after loading the library), while the
// other, which ran, is not: each take is counted once.
func TestRetrySendsOnlyTheRefused(t *testing.T) {
	srv := redistest.Start(t)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	s := New(client)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	q := core.Query{Policy: "retry", Key: "k", N: 1, Keep: 10, Rules: []core.Rule{{Limit: 10, Window: time.Minute}}}
	l := core.Lease{Policy: "retry", Key: "k", Owner: 1, N: 1, Limit: 50, TTL: time.Minute}
	for i, flush := range [][]any{nil, {"SCRIPT", "FLUSH"}, {"FUNCTION", "FLUSH"}} {
		if flush != nil {
			srv.Do(t, flush...)
		}
		take, lease := redislib.Get(), redislib.Get()
		if err := take.Decision(s.prefix, &q, redislib.OpTake, 0, time.Now().UnixMicro(), false); err != nil {
			t.Fatal(err)
		}
		l.Seq = int64(i + 1)
		lease.Lease(s.prefix, l, redislib.OpTake, false)
		s.flight(ctx, []*redislib.Call{take, lease})
		if take.Err != nil || lease.Err != nil || !take.Allowed || !lease.Allowed {
			t.Fatalf("flight after %v: take %+v, %v; lease %+v, %v", flush, take.Allowed, take.Err, lease.Allowed, lease.Err)
		}
		if take.Rules.All()[0].Used != int64(i+1) || lease.Used != int64(i+1) {
			t.Errorf("flight %d after %v: take Used %d, lease held %d; want %d each (a call that ran is not sent again)",
				i+1, flush, take.Rules.All()[0].Used, lease.Used, i+1)
		}
		redislib.Put(take)
		redislib.Put(lease)
	}
}

// TestSplitOnTryAgain: a flight of two takes of one slot, one key on the
// source node and one not there, while the slot is open for migration
// (IMPORTING, MIGRATING) and nothing has moved yet: their script call of
// two keys is refused with TRYAGAIN, and each take is sent again at once
// in a call of its own, the missing key's following ASK to the importing
// node. Both are admitted, each counted once, and stay counted after the
// slot has moved.
func TestSplitOnTryAgain(t *testing.T) {
	c := redistest.StartCluster(t)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: c.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	s := New(client)
	t.Cleanup(s.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	slot := redistest.Slot("split")
	keys := redistest.KeysWhere(2, "s", func(s int) bool { return s == slot })
	query := func(key string) core.Query {
		return core.Query{Policy: "split", Key: key, N: 1, Keep: 10, Rules: []core.Rule{{Limit: 10, Window: time.Minute}}}
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
			if err := calls[i].Decision(s.prefix, &q, redislib.OpTake, 0, time.Now().UnixMicro(), true); err != nil {
				t.Fatal(err)
			}
		}
		s.flight(ctx, calls)
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
