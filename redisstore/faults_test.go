package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/redisstore"
)

// latencyMargin is what a decision may take beyond the limiter's timeout
// before a test calls the timeout broken: scheduling on a loaded 2-core
// machine under -race.
const latencyMargin = 80 * time.Millisecond

// defaultTimeout is a limiter's store timeout when no core.WithTimeout
// sets another.
const defaultTimeout = 20 * time.Millisecond

// testRedisPoolExhausted (in TestTimed): with every connection of the client's pool
// held elsewhere, a decision still returns within the limiter's timeout,
// decided locally, alone or with others in flight: the deadline bounds the
// wait for a connection, not go-redis's PoolTimeout.
func testRedisPoolExhausted(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 1, PoolTimeout: 3 * time.Second, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	store := redisstore.New(rdb)
	warm(t, store)
	l := testkit.Limiter(t, store, core.Policy{Name: "pool", Rules: []core.Rule{{Limit: 100, Window: time.Minute}}}, core.WithBreaker(0, 0))
	conn := rdb.Conn() // holds the pool's only connection
	t.Cleanup(func() { _ = conn.Close() })
	if err := conn.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	check := func(key string) {
		start := time.Now()
		d, err := l.Allow(context.Background(), key)
		if lat := time.Since(start); err != nil || d.Source != core.SourceLocal || lat > defaultTimeout+latencyMargin {
			t.Errorf("Allow(%s) with the pool exhausted = %+v, %v after %v; want decided locally within the %v timeout",
				key, d, err, lat, defaultTimeout)
		}
	}
	check("alone")
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() { check(fmt.Sprintf("k%d", i)) })
	}
	wg.Wait()
}

// warm readies store for a test that times its calls: a decision with a
// generous timeout opens a connection and loads the library, so that the
// test's first decision under the 20 ms default pays for neither on a
// busy machine.
func warm(t *testing.T, store core.Store) {
	t.Helper()
	l := testkit.Limiter(t, store, core.Policy{Name: "warm-up", Rules: []core.Rule{{Limit: 1, Window: time.Second}}},
		core.WithTimeout(5*time.Second))
	if d, err := l.Allow(context.Background(), "warm-up"); err != nil || d.Source != core.SourceStore {
		t.Fatalf("warming the store: Allow = %+v, %v; want a decision of the store", d, err)
	}
}

// TestRefusedConnectionNamed: a decision that times out because go-redis
// cannot connect (it dials again in the background, and the call waits
// for a connection) says why: the store error names the refused
// connection, not only the deadline.
func TestRefusedConnectionNamed(t *testing.T) {
	if testing.Short() {
		t.Skip("Redis-backed")
	}
	srv := redistest.Start(t)
	addr := srv.Addr()
	srv.Stop() // nothing listens there now
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	ev := &testkit.Events{}
	l := testkit.Limiter(t, redisstore.New(rdb), core.Policy{Name: "refused", Rules: []core.Rule{{Limit: 5, Window: time.Minute}}},
		core.WithObserver(ev))
	if d, err := l.Allow(context.Background(), "k"); err != nil || d.Source != core.SourceLocal {
		t.Fatalf("Allow with nothing listening = %+v, %v; want decided locally", d, err)
	}
	errs := ev.Of(core.EventStoreError)
	if len(errs) != 1 || !strings.Contains(errs[0].Err.Error(), "connection refused") {
		t.Errorf("store errors %v, want one that names the refused connection", errs)
	}
}
