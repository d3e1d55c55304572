package redissuite

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// testHostileKeysOnRedis: keys with the characters Redis key names and
// hash tags care about reach Redis as the store's Key of the bounded key,
// and are decided by the store without error.
func testHostileKeysOnRedis(t *testing.T, drv Driver) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	store := drv.New(t, srv)
	p := core.Policy{Name: "odd", Rules: []core.Rule{{Limit: 1, Window: time.Minute}}}
	l := testkit.Limiter(t, store, p, core.WithTimeout(5*time.Second))
	ctx := context.Background()
	for _, key := range []string{"", "{", "}", "{}", "}{", "a:b", "a}b{c", "\x00", "\r\n*3\r\n", "\xff\xfe", "#", strings.Repeat("{", 200)} {
		for i, want := range []bool{true, false} {
			d, err := l.Allow(ctx, key)
			if err != nil || d.Allowed != want || d.Source != core.SourceStore {
				t.Errorf("Allow(%q) #%d = %+v, %v; want Allowed=%v by the store", key, i+1, d, err, want)
			}
		}
		if n := zcard(t, rdb, store.Key(p.Name, key)); n != 1 {
			t.Errorf("ZCARD of the key of %q = %d, want 1", key, n)
		}
	}
}

// testHostileRandomKeyFlood: a flood of keys each seen once leaves memory
// bounded: every Redis key has a TTL. (That the MemoryStore sweeps keys
// whose window has passed is core's TestHostileRandomKeyFlood.)
func testHostileRandomKeyFlood(t *testing.T, drv Driver) {
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		rdb := srv.Client(t)
		store := drv.New(t, srv)
		ctx := context.Background()
		for _, alg := range []core.Algorithm{core.SlidingLog, core.SlidingBuckets} {
			l := testkit.Limiter(t, store, core.Policy{Name: "flood-" + alg.String(), Algorithm: alg,
				Rules: []core.Rule{{Limit: 1, Window: time.Second}, {Limit: 5, Window: 10 * time.Second}}}, core.WithTimeout(5*time.Second))
			for i := range 1000 {
				if d, err := l.Allow(ctx, fmt.Sprintf("r%d-%x", i, rand.Uint64())); err != nil || d.Source != core.SourceStore {
					t.Fatalf("Allow = %+v, %v", d, err)
				}
			}
		}
		keys, err := rdb.Keys(ctx, "*").Result()
		if err != nil {
			t.Fatal(err)
		}
		cmds, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range keys {
				p.PTTL(ctx, k)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		worst := time.Hour
		for i, c := range cmds {
			ttl := c.(*redis.DurationCmd).Val()
			worst = min(worst, ttl)
			if ttl <= 0 || ttl > 21*time.Second {
				t.Errorf("PTTL %q = %v, want a TTL of at most twice the longest window (10s)", keys[i], ttl)
			}
		}
		fleet := 0
		for _, k := range keys {
			if strings.HasSuffix(k, ":fleet") {
				fleet++ // the instances using the policy, one key
			}
		}
		if len(keys)-fleet != 2000 || fleet > 2 {
			t.Errorf("%d Redis keys after 2000 new keys (%d of them a policy's fleet), want 2000 and one fleet per policy", len(keys), fleet)
		}
		t.Logf("%d Redis keys, each with a TTL (shortest %v)", len(keys), worst)
	})
}

// testHostileHugeCost: one request of the largest cost a SlidingLog takes
// (its limit, at most 100,000) is one bounded piece of work for Redis,
// not a stall: the script runs in well under the 1.8 s that a sorted set
// of 1,000,000 members once took.
func testHostileHugeCost(t *testing.T, drv Driver) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	store := drv.New(t, srv)
	l := testkit.Limiter(t, store, core.Policy{Name: "huge-cost", Rules: []core.Rule{{Limit: 100_000, Window: time.Hour}}},
		core.WithTimeout(10*time.Second))
	ctx := context.Background()
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	d, err := l.AllowN(ctx, "k", 100_000)
	if err != nil || !d.Allowed || d.Source != core.SourceStore {
		t.Fatalf("AllowN(100000) = %+v, %v", d, err)
	}
	if d, _ := l.Allow(ctx, "k"); d.Allowed {
		t.Errorf("Allow after the whole limit = %+v, want denied", d)
	}
	usec := commandUsec(t, rdb, "fcall")
	t.Logf("Redis spent %d µs on the two calls", usec)
	if usec > 200_000 {
		t.Errorf("Redis spent %v on one request of cost 100000, want a bounded piece of work (< 200ms)", time.Duration(usec)*time.Microsecond)
	}
	if _, err := l.AllowN(ctx, "k", 100_001); !errors.Is(err, core.ErrInvalidCost) {
		t.Errorf("AllowN(100001) error = %v, want ErrInvalidCost", err)
	}
}
