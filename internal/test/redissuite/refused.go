package redissuite

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redislib"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// testTopRefusedCounts: what counts as a refusal, on Redis: every denial
// counts, under the key as the app gave it (without a shard's suffix),
// whichever tier decided it. (The rest, and the memory store's, are
// core's TestTopRefusedCounts.)
func testTopRefusedCounts(t *testing.T, drv Driver) {
	t.Run("shards", func(t *testing.T) { testkit.TopRefusedShards(t, fleetBackend(drv)) })
	t.Run("tiers", func(t *testing.T) { testkit.TopRefusedTiers(t, fleetBackend(drv)) })
}

// testDeniedPathAllocs: counting refusals costs the denied path no
// allocation: a flood of one key answered by the deny cache (Redis), hot
// or spread over many keys. (The memory store's denials: core's
// TestDeniedPathAllocs.)
func testDeniedPathAllocs(t *testing.T, drv Driver) {
	testkit.DeniedPathAllocs(t, fleetBackend(drv), core.SourceCache)
}

// testTopRefusedBound: a flood of 100,000 distinct refused keys, each
// refused once, beside ten keys refused hundreds to thousands of times,
// from 8 goroutines: Redis never keeps more than 1,000 keys a minute, and
// the ten heavy keys still come first, each within a few refusals of its
// count. (Core's TestTopRefusedBound runs the flood on the memory store,
// and checks there, through a hook of core's own tests, that the
// limiter's sketch never counts more than its fixed number of keys.)
func testTopRefusedBound(t *testing.T, drv Driver) {
	srv := redistest.Start(t)
	t.Run("redis", func(t *testing.T) {
		const policy = "top-bound-redis"
		events := &testkit.Events{}
		l := testkit.Limiter(t, drv.New(t, srv), testkit.Policy(policy, testkit.PerHour(1)), core.WithTimeout(testkit.StoreTimeout),
			core.WithObserver(events))
		ctx := context.Background()
		rf := testkit.NewRefusedFlood(l)
		// Flushed every 500 rounds (5,000 single keys), as the timer
		// would every 5 s at 1,000 refusals a second.
		const every = 500
		// On Redis, in parallel: the heavy keys' refusals are
		// counted by their deny-cache entries, whatever the order.
		for base := 0; base < testkit.FloodRounds; base += every {
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Go(func() {
					for r := base + g; r < base+every; r += 8 {
						rf.Round(t, r)
					}
				})
			}
			wg.Wait()
			// TopRefused adds this instance's refusals to the
			// store first, as its timer would.
			if _, err := l.TopRefused(ctx, 1); err != nil {
				t.Fatal(err)
			}
		}
		now := srv.Do(t, "TIME").([]any)
		sec, err := strconv.ParseInt(now[0].(string), 10, 64)
		if err != nil {
			t.Fatalf("TIME answered %v: %v", now, err)
		}
		for _, k := range redislib.RefusedKeys("ratekit", policy, redislib.RefusedMinute(time.Unix(sec, 0))) {
			if n := srv.Do(t, "ZCARD", k).(int64); n > redislib.RefusedKeep {
				t.Errorf("ZCARD %s = %d, over the bound of %d", k, n, redislib.RefusedKeep)
			}
		}
		got, want := rf.Top(t), rf.Heavy
		// A flush of the limiter's timer that timed out (a loaded
		// machine) drops its counts rather than risk counting them
		// twice, and says so: then the counts are lower bounds alone.
		slack := int64(2)
		if failed := events.Count(core.EventStoreError); failed > 0 {
			t.Logf("%d flushes failed (%v): the counts are lower bounds", failed, events.Of(core.EventStoreError)[0].Err)
			slack = want[0].Refusals
		}
		// In parallel, a refusal that reaches the sketch rather than
		// the deny cache (a denial decided while another replaced the
		// key's entry) may be pushed out of it by the flood before a
		// flush: it is lost, never added. The heavy keys come first,
		// in order, each within a few refusals of its count, never over.
		for i, w := range want {
			if i >= len(got) || got[i].Key != w.Key || got[i].Refusals > w.Refusals || got[i].Refusals < w.Refusals-slack {
				t.Errorf("the top %d after the flood = %v\nwant %v, each within %d below", len(want), got, want, slack)
				break
			}
		}
	})
}
