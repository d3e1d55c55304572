package redissuite

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// testShardsNeverOverAdmit: app instances flooding one sharded key
// concurrently admit exactly the limit between them, on Redis (core's
// TestShardsNeverOverAdmit: on the memory store).
func testShardsNeverOverAdmit(t *testing.T, drv Driver) {
	const (
		limit      = 100
		shards     = 8
		instances  = 3
		goroutines = 16
		each       = 20
	)
	for _, tc := range []struct {
		name  string
		store func(t *testing.T) core.Store
	}{
		{"redis", func(t *testing.T) core.Store { return drv.New(t, redistest.Start(t)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.store(t)
			p := core.Policy{Name: "sharded", Rules: []core.Rule{{Limit: limit, Window: time.Minute}}, Shards: shards}
			var allowed, fallbacks atomic.Int64
			var wg sync.WaitGroup
			for range instances {
				// A generous timeout: a fallback would decide locally.
				l := testkit.Limiter(t, st, p, core.WithTimeout(5*time.Second))
				for range goroutines {
					wg.Go(func() {
						for range each {
							d, err := l.Allow(context.Background(), "hot")
							if err != nil {
								t.Errorf("Allow(hot): %v", err)
								return
							}
							if d.Source.Fallback() {
								fallbacks.Add(1)
							}
							if d.Allowed {
								allowed.Add(1)
							}
						}
					})
				}
			}
			wg.Wait()
			if got := fallbacks.Load(); got != 0 {
				t.Errorf("%d fallback decisions, want 0", got)
			}
			// 960 requests, 120 per shard: every shard fills, none
			// overflows.
			if got := allowed.Load(); got != limit {
				t.Errorf("%d requests on a key with Limit %d in %d shards: %d allowed, want exactly %d", instances*goroutines*each, limit, shards, got, limit)
			}
		})
	}
}

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
