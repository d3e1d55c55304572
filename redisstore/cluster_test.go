package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/redissuite"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/redisstore"
)

// clusterEnv is one cluster shared by the subtests of a test, and a client
// on it that checks slots and counts redirects.
type clusterEnv struct {
	c         *redistest.Cluster
	rdb       *redis.ClusterClient
	slots     *slotHook
	redirects *redissuite.Redirects
}

func newClusterEnv(t *testing.T, opts ...redistest.ClusterOption) *clusterEnv {
	t.Helper()
	start := time.Now()
	c := redistest.StartCluster(t, opts...)
	t.Logf("cluster of %d nodes up in %v", c.Len(), time.Since(start))
	e := &clusterEnv{c: c, slots: &slotHook{}, redirects: &redissuite.Redirects{}}
	e.rdb = redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: c.Addrs(),
		// go-redis v9.23 shares a node's options with the redis.Conn
		// [redisstore.WithWaitReplicas] takes from it, under two locks, and its
		// auto mode writes them when the server (Redis 7) refuses
		// maintenance notifications: a race in go-redis, not ours.
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		NewClient: func(opt *redis.Options) *redis.Client {
			n := redis.NewClient(opt)
			n.AddHook(&redirectHook{e.redirects})
			return n
		},
	})
	e.rdb.AddHook(e.slots)
	t.Cleanup(func() {
		if cross := e.slots.crossSlot(); len(cross) > 0 {
			t.Errorf("commands that span slots: %v", cross)
		}
		_ = e.rdb.Close()
	})
	return e
}

// TestRedisCluster runs on a Cluster of three masters, through one
// go-redis cluster client whose hooks check every command's slots: 3000
// users' keys spread over the masters, and WAIT on masters without
// replicas. (The store suite, Reset, migrations and reshards, on every
// driver: redissuite's RedisCluster.)
func TestRedisCluster(t *testing.T) {
	e := newClusterEnv(t)
	t.Run("Spread", func(t *testing.T) { testClusterSpread(t, e) })
	t.Run("WaitReplicasWithoutReplicas", func(t *testing.T) {
		// WAIT 1 on masters without replicas: every admission waits the
		// timeout, is reported short, and still stands.
		store := redisstore.New(e.rdb, redisstore.WithPrefix("wait0"), redisstore.WithWaitReplicas(1, 5*time.Millisecond))
		l := testkit.Limiter(t, store, core.Policy{Name: "w", Rules: []core.Rule{{Limit: 2, Window: time.Minute}}}, core.WithTimeout(5*time.Second))
		ctx := context.Background()
		for _, key := range []string{"a", "a", "a", "b"} {
			if _, err := l.Allow(ctx, key); err != nil {
				t.Fatal(err)
			}
		}
		if waits, short := store.ReplicaWaits(); waits != 3 || short != 3 {
			t.Errorf("ReplicaWaits() = %d, %d; want 3, 3 (3 admissions, no replica)", waits, short)
		}
		if d, err := l.Peek(ctx, "a"); err != nil || d.Rules()[0].Used != 2 || d.Source != core.SourceStore {
			t.Errorf("Peek(a) = %+v, %v; want Used 2 from the store", d, err)
		}
	})
	if t.Failed() {
		return
	}
	if n := e.slots.scripts.Load(); n == 0 {
		t.Error("no script call seen on the cluster client")
	}
}

// TestRedisClusterReplicas runs on three masters with a replica each.
func TestRedisClusterReplicas(t *testing.T) {
	e := newClusterEnv(t, redistest.WithReplicas())
	t.Run("WaitReplicas", func(t *testing.T) {
		store := redisstore.New(e.rdb, redisstore.WithPrefix("wait1"), redisstore.WithWaitReplicas(1, time.Second))
		l := testkit.Limiter(t, store, core.Policy{Name: "w", Rules: []core.Rule{{Limit: 1, Window: time.Minute}}}, core.WithTimeout(5*time.Second))
		ctx := context.Background()
		const users = 200
		for u := range users {
			for i, want := range []bool{true, false} {
				d, err := l.Allow(ctx, "u"+strconv.Itoa(u))
				if err != nil || d.Allowed != want || d.Source.Fallback() {
					t.Fatalf("Allow(u%d) #%d = %+v, %v; want Allowed=%v", u, i+1, d, err, want)
				}
			}
		}
		if waits, short := store.ReplicaWaits(); waits != users || short != 0 {
			t.Errorf("ReplicaWaits() = %d, %d; want %d, 0 (every admission acknowledged by its master's replica)", waits, short, users)
		}
	})
	t.Run("FailoverUnderLoad", func(t *testing.T) {
		// Keys of master 0's slots, hammered while its replica takes over
		// (CLUSTER FAILOVER: the master stops writes until the replica has
		// caught up, so nothing is lost), with WithWaitReplicas on.
		keys := redistest.KeysWhere(600, "f", func(slot int) bool { return slot < redistest.SlotCount/3 })
		store := redisstore.New(e.rdb, redisstore.WithPrefix("fo"), redisstore.WithWaitReplicas(1, 500*time.Millisecond))
		movedBefore := e.redirects.Moved.Load()
		h := redissuite.NewHammer(t, store, keys)
		var (
			r    int
			took time.Duration
		)
		h.Run(func() {
			start := time.Now()
			r = e.c.For(t).Failover(0)
			took = time.Since(start)
		})
		h.Check()
		waits, short := store.ReplicaWaits()
		t.Logf("failover of master 0 to node %d in %v under load", r, took.Round(time.Millisecond))
		t.Logf("load: %s; MOVED=%d; replica waits %d, short %d", h, e.redirects.Moved.Load()-movedBefore, waits, short)
		if admitted := h.Admitted(); h.Fallbacks == 0 && waits != admitted {
			t.Errorf("ReplicaWaits() waits = %d, want %d (one per admission)", waits, admitted)
		}
	})
}

// testClusterSpread: 3000 users' keys land on all three masters, each
// decision in one slot.
func testClusterSpread(t *testing.T, e *clusterEnv) {
	const users = 3000
	ctx := context.Background()
	store := redisstore.New(e.rdb, redisstore.WithPrefix("spread"))
	l := testkit.Limiter(t, store, core.Policy{Name: "users", Rules: []core.Rule{{Limit: 5, Window: time.Minute}}}, core.WithTimeout(5*time.Second))
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for u := g; u < users; u += 8 {
				d, err := l.Allow(ctx, "user-"+strconv.Itoa(u))
				if err != nil || !d.Allowed || d.Source != core.SourceStore {
					t.Errorf("Allow(user-%d) = %+v, %v; want allowed by the store", u, d, err)
					return
				}
			}
		})
	}
	wg.Wait()
	var (
		mu    sync.Mutex
		total int
		per   []string
	)
	err := e.rdb.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		var n int
		iter := m.Scan(ctx, 0, "spread:users:*", 1000).Iterator()
		for iter.Next(ctx) {
			if !strings.HasSuffix(iter.Val(), ":fleet") { // the instances using the policy
				n++
			}
		}
		if err := iter.Err(); err != nil {
			return err
		}
		size, err := m.DBSize(ctx).Result()
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		total += n
		per = append(per, fmt.Sprintf("%s: %d keys (DBSIZE %d)", m.Options().Addr, n, size))
		// 3000 keys over 3 masters: 1000 each, standard deviation 26.
		if n < 800 || n > 1200 {
			t.Errorf("master %s holds %d of %d users' keys, want about a third", m.Options().Addr, n, users)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("ForEachMaster: %v", err)
	}
	t.Logf("%d users: %s", users, strings.Join(per, "; "))
	if total != users {
		t.Errorf("%d limiter keys on the masters, want %d (one per user)", total, users)
	}
	// Each user's key sits in its hash tag's slot.
	for _, u := range []string{"user-0", "user-1", "user-2999"} {
		key := store.Key("users", u)
		slot := redistest.Slot(u)
		owner := e.c.Node(e.c.For(t).SlotOwner(slot))
		if n, _ := owner.Do(t, "CLUSTER", "COUNTKEYSINSLOT", slot).(int64); n < 1 {
			t.Errorf("CLUSTER COUNTKEYSINSLOT %d (slot of %s) on its owner = %d, want >= 1", slot, key, n)
		}
		if got := redistest.Slot(key); got != slot {
			t.Errorf("Slot(%q) = %d, want %d, the slot of its hash tag %q", key, got, slot, u)
		}
	}
}

// TestClusterLiveMigration: see [redissuite.LiveMigration]. The go-redis
// client keeps its default options but one: before it follows a redirect
// met in a pipeline it pauses ClusterOptions.MinRetryBackoff (8 to 24 ms
// by default, more than the limiter's default timeout), made 5 s here so
// that a pause shows as a timeout however loaded the machine: the store
// never lets go-redis pause on a redirect.
func TestClusterLiveMigration(t *testing.T) {
	c := redistest.StartCluster(t)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), MinRetryBackoff: 5 * time.Second, MaxRetryBackoff: 5 * time.Second})
	t.Cleanup(func() { _ = client.Close() })
	store := redisstore.New(client)
	t.Run("OneSlot", func(t *testing.T) { redissuite.LiveMigration(t, c.For(t), store, "one", false) })
	t.Run("MixedSlots", func(t *testing.T) { redissuite.LiveMigration(t, c.For(t), store, "mixed", true) })
}

// TestClusterMasterKilled: see [redissuite.MasterKilled], on a store of a
// go-redis cluster client of default options: the killed master's keys
// are decided by the store again within 5 s of the Cluster agreeing on
// its promoted replica.
func TestClusterMasterKilled(t *testing.T) {
	c := redistest.StartCluster(t, redistest.WithReplicas())
	redissuite.MasterKilled(t, c, redisstore.New(c.Client(t)))
}
