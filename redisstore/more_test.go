package redisstore_test

import (
	"context"
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/redisstore"
)

// TestMoreKeyImportsEarlierKeys: a policy with a lockout or calendar
// rules keeps a key in one hash (":m"); the first decision that makes it
// moves in what earlier versions kept beside it (a lockout under ":l",
// calendar counts under ":c") and the windows the policy kept before it
// had a lockout, so that an upgrade lifts no lockout and a new rule
// starts no window over.
func TestMoreKeyImportsEarlierKeys(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	store := redisstore.New(rdb)
	ctx := context.Background()
	sliding := []core.Rule{{Limit: 3, Window: time.Hour}}
	for _, algo := range []core.Algorithm{core.SlidingLog, core.SlidingBuckets} {
		t.Run(algo.String(), func(t *testing.T) {
			name := "import-" + algo.String()
			plain := testkit.Limiter(t, store, core.Policy{Name: name, Algorithm: algo, Rules: sliding}, core.WithTimeout(2*time.Second))
			for range 2 {
				if d, err := plain.Allow(ctx, "win"); err != nil || !d.Allowed {
					t.Fatalf("plain Allow(win) = %+v, %v", d, err)
				}
			}
			// A lockout an earlier version kept under ":l": ends in an
			// hour, one offence.
			now, err := rdb.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			lk := store.Key(name, "locked") + ":l"
			v := make([]byte, 16)
			binary.LittleEndian.PutUint64(v, math.Float64bits(float64(now.Add(time.Hour).UnixMicro())))
			binary.LittleEndian.PutUint64(v[8:], math.Float64bits(1))
			if err := rdb.Set(ctx, lk, v, time.Hour).Err(); err != nil {
				t.Fatal(err)
			}

			more := testkit.Limiter(t, store, core.Policy{Name: name, Algorithm: algo, Rules: sliding,
				Lockout: core.Lockout{For: time.Hour}}, core.WithTimeout(2*time.Second), core.WithDenyCache(0))
			if d, err := more.Allow(ctx, "locked"); err != nil || d.Allowed || !d.Locked || d.RetryAfter < 59*time.Minute {
				t.Errorf("Allow(locked) after the upgrade = %+v, %v; want still locked out for about an hour", d, err)
			}
			if n, _ := rdb.Exists(ctx, lk).Result(); n != 0 {
				t.Errorf("%s still exists after the key was moved into its hash", lk)
			}
			if d, err := more.Allow(ctx, "win"); err != nil || !d.Allowed || d.Remaining != 0 {
				t.Errorf("Allow(win) once the policy has a lockout = %+v, %v; want the third unit of 3", d, err)
			}
			if d, _ := more.Allow(ctx, "win"); d.Allowed || !d.Locked {
				t.Errorf("Allow(win) #4 = %+v, want denied and locked out", d)
			}
			if ttl, _ := rdb.PTTL(ctx, store.Key(name, "win")+":m").Result(); ttl < 59*time.Minute {
				t.Errorf("PTTL of win's hash = %v, want about an hour (its lockout)", ttl)
			}
		})
	}
}

// TestGivenClusterSlots: a go-redis ClusterClient given its topology
// (ClusterOptions.ClusterSlots, here one plain server holding every
// slot, which answers no CLUSTER command) decides on it, and the store
// takes the slot map from the client, not from CLUSTER SLOTS: partitions
// name the server.
func TestGivenClusterSlots(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{
		ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) {
			return []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: srv.Addr()}}}}, nil
		},
	})
	t.Cleanup(func() { _ = rdb.Close() })
	store := redisstore.New(rdb)
	l := testkit.Limiter(t, store, core.Policy{Name: "given", Rules: []core.Rule{{Limit: 1, Window: time.Minute}}}, core.WithTimeout(2*time.Second))
	ctx := context.Background()
	for i, want := range []bool{true, false} {
		if d, err := l.Allow(ctx, "k"); err != nil || d.Allowed != want || d.Source != core.SourceStore {
			t.Fatalf("Allow(k) #%d = %+v, %v; want Allowed=%v from the store", i+1, d, err, want)
		}
	}
	testkit.WaitUntil(t, "Partition names the server", func() bool { return store.Partition("given", "k") == srv.Addr() })
}
