package redissuite

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// testShardsRedisKeys: on Redis each shard is a key of its own, with a
// TTL, whose hash tag puts it in a slot of its own, so a hot key spreads
// over the masters of a cluster.
func testShardsRedisKeys(t *testing.T, drv Driver) {
	const shards = 8
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	store := drv.New(t, srv)
	p := core.Policy{Name: "global", Rules: []core.Rule{{Limit: 1000, Window: time.Minute}}, Shards: shards}
	l := testkit.Limiter(t, store, p, core.WithTimeout(5*time.Second))
	ctx := context.Background()
	for _, key := range []string{"all", "user:42", strings.Repeat("x", 300)} {
		for range shards {
			if d, err := l.Allow(ctx, key); err != nil || !d.Allowed || d.Source != core.SourceStore {
				t.Fatalf("Allow(%.20q) = %+v, %v", key, d, err)
			}
		}
		slots := map[int]bool{}
		for i := range shards {
			rk := store.Key(p.Name, fmt.Sprintf("%s#%d", driver.BoundKey(key), i))
			if n := zcard(t, rdb, rk); n != 1 {
				t.Errorf("ZCARD %.40q = %d, want 1 (one request per shard)", rk, n)
			}
			if ttl := rdb.PTTL(ctx, rk).Val(); ttl <= 0 || ttl > 2*time.Minute+time.Second {
				t.Errorf("PTTL %.40q = %v, want at most twice the window", rk, ttl)
			}
			slots[redistest.Slot(rk)] = true
		}
		if len(slots) != shards {
			t.Errorf("the %d shards of %.20q are in %d slots, want %d", shards, key, len(slots), shards)
		}
		if got := len(srv.Do(t, "KEYS", store.Key(p.Name, driver.BoundKey(key)+"#*")).([]any)); got != shards {
			t.Errorf("%d Redis keys for the shards of %.20q, want %d", got, key, shards)
		}
	}
}
