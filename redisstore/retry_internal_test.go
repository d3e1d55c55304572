package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redislib"
	"github.com/ratekit/ratekit/internal/redistest"
)

// TestRetrySendsOnlyTheRefused: a flight of a decision (FCALL of the
// library) and a lease (EVALSHA) meets a server whose script cache was
// flushed: the lease is refused with NOSCRIPT and sent again with its
// source, while the decision, which ran, is not sent again: its unit is
// counted once.
func TestRetrySendsOnlyTheRefused(t *testing.T) {
	srv := redistest.Start(t)
	s := New(srv.Client(t))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	q := core.Query{Policy: "retry", Key: "k", N: 1, Keep: 10, Rules: []core.Rule{{Limit: 10, Window: time.Minute}}}
	l := core.Lease{Policy: "retry", Key: "k", Owner: 1, Seq: 1, N: 1, Limit: 5, TTL: time.Minute}
	flight := func() (take, lease *redislib.Call) {
		take, lease = redislib.Get(), redislib.Get()
		if err := take.Decision(s.prefix, &q, redislib.OpTake, 0, time.Now().UnixMicro(), false); err != nil {
			t.Fatal(err)
		}
		lease.Lease(s.prefix, l, redislib.OpPeek, false)
		s.flight(ctx, []*redislib.Call{take, lease})
		return take, lease
	}
	take, lease := flight() // loads the library and the lease script
	if take.Err != nil || lease.Err != nil || !take.Allowed {
		t.Fatalf("first flight: take %+v, lease %v", take.Err, lease.Err)
	}
	srv.Do(t, "SCRIPT", "FLUSH")
	take, lease = flight()
	if take.Err != nil || lease.Err != nil || !take.Allowed {
		t.Fatalf("flight after SCRIPT FLUSH: take %v, lease %v", take.Err, lease.Err)
	}
	r, err := s.Peek(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if used := r.Rules.All()[0].Used; used != 2 {
		t.Errorf("after two flights of one take each: Used %d, want 2 (a decision that ran is not sent again)", used)
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
	s := New(c.Client(t))
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
