package core_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/internal/redistest"
	"github.com/ratekit/ratekit/internal/testkit"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/ratekit/ratekit/rueidisstore"
)

// clusterStore is a store of either driver on a Cluster: it names the
// node of a key's slot (driver.Partitioned), and the Redis key of a key.
type clusterStore interface {
	core.Store
	driver.Partitioned
	Key(policy, key string) string
}

// clusterDriver builds stores of one driver on a test's Cluster.
type clusterDriver struct {
	name string
	// store returns a store under prefix on a client of its own, built
	// with the client's default options; on hooked, the go-redis store is
	// on the env's client, whose node hooks count redirects and TRYAGAIN.
	store func(t *testing.T, e *clusterEnv, prefix string, hooked bool) clusterStore
}

var clusterDrivers = []clusterDriver{
	{"redis", func(t *testing.T, e *clusterEnv, prefix string, hooked bool) clusterStore {
		client := e.rdb
		if !hooked {
			client = e.c.Client(t)
		}
		return redisstore.New(client, redisstore.WithPrefix(prefix))
	}},
	{"rueidis", func(t *testing.T, e *clusterEnv, prefix string, _ bool) clusterStore {
		client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: e.c.Addrs()})
		if err != nil {
			t.Fatalf("rueidis.NewClient: %v", err)
		}
		t.Cleanup(client.Close)
		s := rueidisstore.New(client, rueidisstore.WithPrefix(prefix))
		t.Cleanup(s.Close)
		return s
	}},
}

// TestRedisClusterPaused pauses one master of a Cluster of three while
// the others serve (see testClusterPausedMaster and
// testClusterBreakersFollowNodes), on each driver. It is timed against
// the limiter's timeout, so make test runs it alone.
func TestRedisClusterPaused(t *testing.T) {
	e := newClusterEnv(t)
	for _, drv := range clusterDrivers {
		t.Run("PausedMaster/"+drv.name, func(t *testing.T) { testClusterPausedMaster(t, e, drv) })
		t.Run("BreakersFollowNodes/"+drv.name, func(t *testing.T) { testClusterBreakersFollowNodes(t, e, drv) })
	}
}

// slotOwners returns the index of the master that serves each slot, as
// CLUSTER SLOTS says now.
func slotOwners(t *testing.T, e *clusterEnv) []int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ranges, err := e.rdb.ClusterSlots(ctx).Result() //nolint:staticcheck // what the store reads (redisstore.clusterSlots)
	if err != nil {
		t.Fatalf("CLUSTER SLOTS: %v", err)
	}
	owners := make([]int, redistest.SlotCount)
	for i := range owners {
		owners[i] = -1
	}
	for _, r := range ranges {
		node := slices.Index(e.c.Addrs(), r.Nodes[0].Addr)
		for s := r.Start; s <= r.End; s++ {
			owners[s] = node
		}
	}
	return owners
}

// warmCluster decides every key once through store with a generous
// timeout (connections made, library loaded), then waits until the store
// names partitions by node address: it knows the Cluster's slot map.
func warmCluster(t *testing.T, store clusterStore, policy string, keys []string) {
	t.Helper()
	warm := testkit.Limiter(t, store, core.Policy{Name: policy, Rules: []core.Rule{{Limit: 100000, Window: time.Minute}}},
		core.WithTimeout(5*time.Second))
	for _, k := range keys {
		if d, err := warm.Peek(context.Background(), k); err != nil || d.Source != core.SourceStore {
			t.Fatalf("warming: Peek(%s) = %+v, %v; want the store's answer", k, d, err)
		}
	}
	testkit.WaitUntil(t, "the store names partitions by node", func() bool {
		return strings.Contains(store.Partition(policy, keys[0]), ":")
	})
}

// pausedTimeout is the limiter's timeout in the tests of a paused master,
// in place of the default 20 ms: on a shared 2-core machine, calls to a
// healthy master miss 20 ms by scheduling alone (measured with no pause
// at all: 8 to 18 of some 3,900 decisions, once enough in a row to open
// a breaker), which says nothing of what the tests are about. What they
// are about does not depend on the timeout: a flight held by the paused
// master lasts go-redis's 3 s read timeout (rueidis: the latest deadline
// of its callers), so any timeout below that fails the calls queued
// behind it.
const pausedTimeout = 250 * time.Millisecond

// waitPauseEnd waits until a pause of d begun at start is over and node i
// answers again.
func waitPauseEnd(t *testing.T, e *clusterEnv, i int, start time.Time, d time.Duration) {
	t.Helper()
	time.Sleep(time.Until(start.Add(d + 50*time.Millisecond)))
	e.c.Node(i).Do(t, "PING")
}

// testClusterPausedMaster: one master paused (CLIENT PAUSE for 3 s) while
// traffic goes on to its keys and to the keys of the other two: every
// decision on the other masters' keys is the store's, none falls back,
// on a go-redis cluster client with default options (no
// ContextTimeoutEnabled: its reads wait out the 3 s read timeout) and on
// rueidis, with FailClosed (and pausedTimeout). The paused master's keys
// are answered closed (issue 19 item 3).
func testClusterPausedMaster(t *testing.T, e *clusterEnv, drv clusterDriver) {
	const pause = 3 * time.Second
	owners := slotOwners(t, e)
	on := func(node int, prefix string) []string {
		return redistest.KeysWhere(8, prefix, func(s int) bool { return owners[s] == node })
	}
	slow := on(0, "slow")
	healthy := append(on(1, "one"), on(2, "two")...)
	store := drv.store(t, e, "paused-"+drv.name, false)
	warmCluster(t, store, "p", append(slices.Clone(slow), healthy...))
	var ev testkit.Events
	l := testkit.Limiter(t, store, core.Policy{Name: "p", Rules: []core.Rule{{Limit: 100000, Window: time.Minute}}},
		core.WithFailurePolicy(core.FailClosed), core.WithTimeout(pausedTimeout), core.WithObserver(&ev))
	ctx := context.Background()

	e.c.Node(0).Pause(pause)
	pausedAt := time.Now()
	var (
		stop                     atomic.Bool
		slowN, slowClosed        atomic.Int64 // decisions on the paused master's keys
		healthyN, healthyNotOurs atomic.Int64 // ... on the others'
		mu                       sync.Mutex
		fell                     []string
		wg                       sync.WaitGroup
	)
	for g := range 2 {
		wg.Go(func() {
			for i := g; !stop.Load(); i++ {
				k := slow[i%len(slow)]
				d, err := l.Allow(ctx, k)
				if err != nil {
					t.Errorf("Allow(%s): %v", k, err)
					return
				}
				slowN.Add(1)
				if d.Source == core.SourceClosed {
					slowClosed.Add(1)
				}
				time.Sleep(500 * time.Microsecond)
			}
		})
	}
	for g := range 4 {
		wg.Go(func() {
			for i := g; !stop.Load(); i++ {
				k := healthy[i%len(healthy)]
				start := time.Now()
				d, err := l.Allow(ctx, k)
				lat := time.Since(start)
				if err != nil {
					t.Errorf("Allow(%s): %v", k, err)
					return
				}
				healthyN.Add(1)
				if d.Source != core.SourceStore || !d.Allowed {
					healthyNotOurs.Add(1)
					mu.Lock()
					fell = append(fell, fmt.Sprintf("%s %v after %v at %v", k, d.Source, lat.Round(time.Millisecond), start.Sub(pausedAt).Round(time.Millisecond)))
					mu.Unlock()
				}
				time.Sleep(500 * time.Microsecond)
			}
		})
	}
	time.Sleep(pause - 500*time.Millisecond)
	stop.Store(true)
	wg.Wait()
	t.Logf("%s, node 0 paused: %d decisions on its keys (%d closed), %d on the other masters' (%d not the store's); %d store errors, %d breaker opens",
		drv.name, slowN.Load(), slowClosed.Load(), healthyN.Load(), healthyNotOurs.Load(), ev.Count(core.EventStoreError), ev.Count(core.EventBreakerOpen))
	if n := healthyNotOurs.Load(); n > 0 {
		t.Errorf("%s: %d of %d decisions on keys of the healthy masters were not the store's: %v", drv.name, n, healthyN.Load(), fell[:min(len(fell), 10)])
	}
	if slowClosed.Load() == 0 {
		t.Errorf("%s: no decision on the paused master's keys was answered closed: did the pause take?", drv.name)
	}
	waitPauseEnd(t, e, 0, pausedAt, pause)
}

// breakerGroup is the group of 256 slots a slot fell in when breakers
// were kept per fixed group of slots (before issue 19 item 5).
func breakerGroup(slot int) int { return slot / 256 }

// testClusterBreakersFollowNodes: a limiter's breakers follow the nodes
// Redis puts keys on, by the hash tag, and never straddle two nodes
// (issue 19 item 5). With FailClosed (and pausedTimeout) and node 0
// paused: four client-chosen keys t<i>}<j>, whose hash tag t<i> is on
// node 0 in a group of slots that node 1 shares (split at 5460/5461) and
// whose whole text hashes to a slot of node 1, fail until node 0's
// breaker opens; then node 1's keys, one in slot 5463 just past the
// split, ones in the slots of the t-keys' whole text, and more, are all
// answered by the store, not closed.
func testClusterBreakersFollowNodes(t *testing.T, e *clusterEnv, drv clusterDriver) {
	const pause = 3 * time.Second
	owners := slotOwners(t, e)
	if owners[5460] != 0 || owners[5461] != 1 || owners[5463] != 1 {
		t.Fatalf("slots 5460, 5461, 5463 served by nodes %d, %d, %d; want 0, 1, 1 (the three masters' even split)",
			owners[5460], owners[5461], owners[5463])
	}
	straddled := breakerGroup(5460)
	var tkeys []string
	var node1 []string
	for i := 0; len(tkeys) < 4; i++ {
		tag := fmt.Sprintf("t%d", i)
		s := redistest.Slot(tag)
		if owners[s] != 0 || breakerGroup(s) != straddled {
			continue
		}
		for j := range 1000 {
			k := fmt.Sprintf("%s}%d", tag, j)
			whole := redistest.Slot(k) // the slot of the whole text: k has no '{'
			if owners[whole] == 1 && owners[breakerGroup(whole)*256] == 1 && owners[breakerGroup(whole)*256+255] == 1 {
				tkeys = append(tkeys, k)
				node1 = append(node1, redistest.KeysWhere(1, "w", func(s int) bool { return s == whole })...)
				break
			}
		}
	}
	node1 = append(node1, redistest.KeysWhere(1, "split", func(s int) bool { return s == 5463 })...)
	node1 = append(node1, redistest.KeysWhere(3, "g", func(s int) bool { return s > 5461 && breakerGroup(s) == straddled })...)
	node1 = append(node1, redistest.KeysWhere(3, "one", func(s int) bool { return owners[s] == 1 })...)

	store := drv.store(t, e, "follow-"+drv.name, false)
	warmCluster(t, store, "f", append(slices.Clone(tkeys), node1...))
	addr := func(i int) string { return e.c.Node(i).Addr() }
	for _, k := range tkeys {
		if p := store.Partition("f", k); p != addr(0) {
			t.Errorf("Partition(f, %q) = %q, want node 0 (%s), the node of its hash tag", k, p, addr(0))
		}
	}
	for _, k := range node1 {
		if p := store.Partition("f", k); p != addr(1) {
			t.Errorf("Partition(f, %q) = %q, want node 1 (%s)", k, p, addr(1))
		}
	}
	var ev testkit.Events
	l := testkit.Limiter(t, store, core.Policy{Name: "f", Rules: []core.Rule{{Limit: 100000, Window: time.Minute}}},
		core.WithFailurePolicy(core.FailClosed), core.WithTimeout(pausedTimeout), core.WithObserver(&ev))
	ctx := context.Background()
	for _, k := range node1 {
		if d, err := l.Allow(ctx, k); err != nil || d.Source != core.SourceStore {
			t.Fatalf("before the pause: Allow(%s) = %+v, %v; want the store's answer", k, d, err)
		}
	}

	e.c.Node(0).Pause(pause)
	pausedAt := time.Now()
	for range 3 {
		for _, k := range tkeys {
			if d, err := l.Allow(ctx, k); err != nil || d.Source != core.SourceClosed {
				t.Errorf("node 0 paused: Allow(%q) = %+v, %v; want closed", k, d, err)
			}
		}
	}
	if n := ev.Count(core.EventBreakerOpen); n != 1 {
		t.Errorf("%d breaker opens after %d failing calls to node 0, want 1 (node 0's)", n, 3*len(tkeys))
	}
	for _, k := range node1 {
		if d, err := l.Allow(ctx, k); err != nil || d.Source != core.SourceStore || !d.Allowed {
			t.Errorf("node 0 paused, its breaker open: Allow(%s) in slot %d of node 1 = %+v, %v; want admitted by the store",
				k, redistest.Slot(k), d, err)
		}
	}
	t.Logf("%s: t-keys %v on node 0; node 1's keys %v answered while node 0's breaker was open", drv.name, tkeys, node1)
	waitPauseEnd(t, e, 0, pausedAt, pause)
}

// testClusterBatchMigration: 16 goroutines decide distinct keys of one
// slot, <tag>}<i> (limit 5 a minute, each key asked 10 times, batching
// on), while the slot migrates with thousands of keys: the decisions
// share script calls, which Redis answers TRYAGAIN once their keys are
// split between the nodes; each such call is sent again at once one key
// per call, each following its own ASK. No decision falls back or errs,
// every key is admitted exactly 5 times, and the store holds what it
// admitted (issue 19 item 4).
func testClusterBatchMigration(t *testing.T, e *clusterEnv, drv clusterDriver) {
	const (
		goroutines = 16
		perKey     = 10
		limit      = 5
		fillers    = 3000
		perG       = 400
	)
	ctx := context.Background()
	// Keys "<tag>}<i>": the store's key <prefix>:<policy>:{<tag>}<i>} has
	// the hash tag <tag>, so they all live in its slot.
	tag := "batch-migration-" + drv.name
	slot := redistest.Slot(tag)
	from := e.c.For(t).SlotOwner(slot)
	to := (from + 1) % 3
	keys := make([]string, goroutines*perG)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s}%d", tag, i)
	}
	pipe := e.rdb.Pipeline()
	for i := range fillers {
		pipe.Set(ctx, fmt.Sprintf("{%s}:fill:%d", tag, i), i, 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatalf("filling slot %d: %v", slot, err)
	}
	store := drv.store(t, e, "bm-"+drv.name, true)
	if rk := store.Key("b", keys[1]); redistest.Slot(rk) != slot {
		t.Fatalf("the store keeps %q in slot %d, want %d, the slot of %q", keys[1], redistest.Slot(rk), slot, tag)
	}
	var ev testkit.Events
	l := testkit.Limiter(t, store, core.Policy{Name: "b", Rules: []core.Rule{{Limit: limit, Window: time.Minute}}},
		core.WithTimeout(testkit.StoreTimeout), core.WithDenyCache(0), core.WithObserver(&ev))
	type counts struct{ asked, store, other atomic.Int64 }
	stats := make([]counts, len(keys))
	var (
		stop    atomic.Bool
		started atomic.Int64 // goroutines past their first key
		wg      sync.WaitGroup
	)
	tryBefore := e.redirects.tryagain.Load()
	for g := range goroutines {
		wg.Go(func() {
			for i := g * perG; i < (g+1)*perG; i++ {
				if i == g*perG+1 {
					started.Add(1)
				}
				for range perKey {
					if stop.Load() {
						return
					}
					d, err := l.Allow(ctx, keys[i])
					if err != nil {
						t.Errorf("Allow(%s): %v", keys[i], err)
						return
					}
					stats[i].asked.Add(1)
					switch {
					case d.Allowed && d.Source == core.SourceStore:
						stats[i].store.Add(1)
					case d.Allowed:
						stats[i].other.Add(1)
					}
				}
			}
			t.Errorf("goroutine %d ran out of its %d keys before the migration ended", g, perG)
		})
	}
	testkit.WaitUntil(t, "every goroutine is under way", func() bool { return started.Load() == goroutines })
	st := e.c.For(t).MigrateSlot(slot, from, to, redistest.MigrateBatch(25), redistest.MigratePause(10*time.Millisecond))
	time.Sleep(300 * time.Millisecond)
	stop.Store(true)
	wg.Wait()

	decided, full := int64(0), 0
	for i := range keys {
		ks := &stats[i]
		decided += ks.asked.Load()
		if ks.asked.Load() == 0 {
			continue
		}
		if n := ks.other.Load(); n > 0 {
			t.Errorf("key %s: %d admissions not by the store", keys[i], n)
		}
		admitted := ks.store.Load()
		if admitted > limit || ks.asked.Load() == perKey && admitted != limit {
			t.Errorf("key %s: asked %d times, admitted %d by the store; want exactly %d", keys[i], ks.asked.Load(), admitted, limit)
		}
		if ks.asked.Load() == perKey {
			full++
		}
		if i%7 == 0 || admitted != limit {
			if d, err := l.Peek(ctx, keys[i]); err != nil || d.Source != core.SourceStore || d.Rules()[0].Used != admitted {
				t.Errorf("Peek(%s) after the migration = %+v, %v; want Used %d from the store", keys[i], d, err, admitted)
			}
		}
	}
	tryagain := e.redirects.tryagain.Load() - tryBefore
	t.Logf("%s: slot %d moved (node %d -> %d): %d keys in %d batches in %v; %d decisions on %d keys (%d asked %d times); TRYAGAIN answers seen (go-redis only): %d",
		drv.name, slot, from, to, st.Keys, st.Batches, st.Duration.Round(time.Millisecond), decided, len(keys), full, perKey, tryagain)
	if n := ev.Count(core.EventStoreError); n > 0 {
		t.Errorf("%d store errors during the migration, want 0", n)
	}
	if n := ev.Count(core.EventFallbackStart); n > 0 {
		t.Errorf("%d fallback episodes during the migration, want 0", n)
	}
	if drv.name == "redis" && tryagain == 0 {
		t.Error("no script call met TRYAGAIN: did the batches meet the migration?")
	}
}
