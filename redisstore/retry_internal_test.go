package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/internal/redislib"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/tryagain"
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
	q := driver.Query{Policy: "retry", Key: "k", N: 1, Keep: 10, Rules: []driver.Rule{{Limit: 10, Window: time.Minute}}}
	l := driver.Lease{Policy: "retry", Key: "k", Owner: 1, Seq: 1, N: 1, Limit: 5, TTL: time.Minute}
	flight := func() (take, lease *redislib.Call) {
		take, lease = redislib.Get(), redislib.Get()
		if err := take.Decision(s.prefix, &q, redislib.OpTake, 0, time.Now().UnixMicro(), false, nil); err != nil {
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

// TestSplitOnTryAgain: see tryagain.Split.
func TestSplitOnTryAgain(t *testing.T) {
	c := redistest.StartCluster(t)
	s := New(c.Client(t))
	tryagain.Split(t, c, s, s.prefix, s.flight)
}
