package rueidisstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/internal/redislib"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/tryagain"
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
	q := driver.Query{Policy: "retry", Key: "k", N: 1, Keep: 10, Rules: []driver.Rule{{Limit: 10, Window: time.Minute}}}
	l := driver.Lease{Policy: "retry", Key: "k", Owner: 1, N: 1, Limit: 50, TTL: time.Minute}
	for i, flush := range [][]any{nil, {"SCRIPT", "FLUSH"}, {"FUNCTION", "FLUSH"}} {
		if flush != nil {
			srv.Do(t, flush...)
		}
		take, lease := redislib.Get(), redislib.Get()
		if err := take.Decision(s.prefix, &q, redislib.OpTake, 0, time.Now().UnixMicro(), false, nil); err != nil {
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

// TestSplitOnTryAgain: see tryagain.Split.
func TestSplitOnTryAgain(t *testing.T) {
	c := redistest.StartCluster(t)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: c.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	s := New(client)
	t.Cleanup(s.Close)
	tryagain.Split(t, c, s, s.prefix, s.flight)
}
