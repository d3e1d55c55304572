package redissuite

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/race"
	"github.com/ratekit/ratekit/internal/redislib"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// refuse asks l for key times times and fails t unless every answer is
// a denial of the store or of the deny cache; it returns how many came
// from the cache.
func refuse(t *testing.T, l *core.Limiter, key string, times int) (cached int) {
	t.Helper()
	for range times {
		d, err := l.Allow(context.Background(), key)
		if err != nil || d.Allowed || d.Source.Fallback() {
			t.Fatalf("Allow(%q) = %+v, %v; want a denial of the store or its cache", key, d, err)
		}
		if d.Source == core.SourceCache {
			cached++
		}
	}
	return cached
}

// admit asks l for key once and fails t unless it is admitted.
func admit(t *testing.T, l *core.Limiter, key string) {
	t.Helper()
	if d, err := l.Allow(context.Background(), key); err != nil || !d.Allowed {
		t.Fatalf("Allow(%q) = %+v, %v; want admitted", key, d, err)
	}
}

// topRefused returns l.TopRefused(n), failing t on an error.
func topRefused(t *testing.T, l *core.Limiter, n int) []core.RefusedKey {
	t.Helper()
	top, err := l.TopRefused(context.Background(), n)
	if err != nil {
		t.Fatalf("TopRefused(%d): %v", n, err)
	}
	return top
}

// testTopRefusedFleet: two instances on one store refuse different counts
// of several keys, most of them answered by their deny caches on Redis;
// once the second has added its counts, TopRefused on either returns the
// exact sums, most refused first and ties in key order.
func testTopRefusedFleet(t *testing.T, drv Driver) {
	for _, b := range []testkit.Backend{fleetBackend(drv)} {
		t.Run(b.Name, func(t *testing.T) {
			ls := testkit.Fleet(t, 2, b, testkit.Policy("top-fleet", testkit.PerHour(1)))
			a, bb := ls[0], ls[1]
			refusals := []struct {
				key  string
				a, b int
			}{{"alice", 5, 4}, {"bob", 1, 7}, {"carol", 3, 3}, {"dave", 0, 6}, {"erin", 2, 0}}
			cached := 0
			for _, r := range refusals {
				admit(t, a, r.key)
				cached += refuse(t, a, r.key, r.a)
				cached += refuse(t, bb, r.key, r.b)
			}
			if b.Name != "memory" && cached == 0 {
				t.Fatal("no denial came from a deny cache: the test does not cover the cache's count")
			}
			// Add bb's refusals to the store, as its timer would: TopRefused
			// adds the asking instance's first (core's test flushes them
			// through a hook of its own).
			if _, err := bb.TopRefused(context.Background(), 1); err != nil {
				t.Fatal(err)
			}
			want := []core.RefusedKey{{Key: "alice", Refusals: 9}, {Key: "bob", Refusals: 8}, {Key: "carol", Refusals: 6},
				{Key: "dave", Refusals: 6}, {Key: "erin", Refusals: 2}}
			for i, l := range ls {
				if got := topRefused(t, l, 10); !reflect.DeepEqual(got, want) {
					t.Errorf("instance %d: TopRefused(10) = %v, want %v", i, got, want)
				}
			}
			if got := topRefused(t, bb, 3); !reflect.DeepEqual(got, want[:3]) {
				t.Errorf("TopRefused(3) = %v, want %v", got, want[:3])
			}
			if got := topRefused(t, a, 0); got != nil {
				t.Errorf("TopRefused(0) = %v, want nothing", got)
			}
		})
	}
}

// testTopRefusedCounts: what counts as a refusal, on Redis: every denial
// counts, under the key as the app gave it (without a shard's suffix),
// whichever tier decided it. (The rest, and the memory store's, are
// core's TestTopRefusedCounts.)
func testTopRefusedCounts(t *testing.T, drv Driver) {
	t.Run("shards", func(t *testing.T) {
		for _, b := range []testkit.Backend{fleetBackend(drv)} {
			t.Run(b.Name, func(t *testing.T) {
				p := testkit.Policy("top-shards", testkit.PerHour(4))
				p.Shards = 4
				l := testkit.Fleet(t, 1, b, p)[0]
				for range 4 {
					admit(t, l, "hot")
				}
				refuse(t, l, "hot", 8)
				want := []core.RefusedKey{{Key: "hot", Refusals: 8}}
				if got := topRefused(t, l, 5); !reflect.DeepEqual(got, want) {
					t.Errorf("TopRefused = %v, want %v", got, want)
				}
			})
		}
	})
	t.Run("tiers", func(t *testing.T) {
		for _, b := range []testkit.Backend{fleetBackend(drv)} {
			t.Run(b.Name, func(t *testing.T) {
				tiers := map[string][]core.Rule{"pro": {testkit.PerHour(2)}}
				resolve := func(_ context.Context, key string) (string, error) {
					if strings.HasPrefix(key, "pro-") {
						return "pro", nil
					}
					return "", nil
				}
				l := testkit.Fleet(t, 1, b, testkit.Policy("top-tiers", testkit.PerHour(1)), core.WithTiers(resolve, tiers))[0]
				admit(t, l, "free-1")
				refuse(t, l, "free-1", 2)
				admit(t, l, "pro-1")
				admit(t, l, "pro-1")
				refuse(t, l, "pro-1", 3)
				want := []core.RefusedKey{{Key: "pro-1", Refusals: 3}, {Key: "free-1", Refusals: 2}}
				if got := topRefused(t, l, 5); !reflect.DeepEqual(got, want) {
					t.Errorf("TopRefused = %v, want %v", got, want)
				}
			})
		}
	})
}

// testDeniedPathAllocs: counting refusals costs the denied path no
// allocation: a flood of one key answered by the deny cache (Redis), hot
// or spread over many keys. (The memory store's denials: core's
// TestDeniedPathAllocs.)
func testDeniedPathAllocs(t *testing.T, drv Driver) {
	if testing.CoverMode() != "" || race.Enabled {
		t.Skip("allocations are counted without coverage or the race detector")
	}
	ctx := context.Background()
	srv := redistest.Start(t)
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("user-%d", i)
	}
	for _, tc := range []struct {
		name  string
		store core.Store
		src   core.Source
		keys  []string
	}{
		{"redis/hot", drv.New(t, srv), core.SourceCache, keys[:1]},
		{"redis/spread", drv.New(t, srv), core.SourceCache, keys},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := testkit.Limiter(t, tc.store, testkit.Policy("allocs-"+strings.ReplaceAll(tc.name, "/", "-"), testkit.PerHour(1)), core.WithTimeout(testkit.StoreTimeout))
			for _, k := range tc.keys {
				admit(t, l, k)
				refuse(t, l, k, 1)
			}
			refused := int64(1) // each key's, so far
			if tc.src == core.SourceCache {
				testkit.WaitUntil(t, "the deny cache answers", func() bool {
					d, _ := l.Allow(ctx, tc.keys[0])
					refused++
					return d.Source == core.SourceCache
				})
			}
			i := 0
			allocs := testing.AllocsPerRun(10_000, func() {
				d, err := l.Allow(ctx, tc.keys[i%len(tc.keys)])
				i++
				if err != nil || d.Allowed || d.Source != tc.src {
					t.Fatalf("Allow = %+v, %v; want a denial, Source %v", d, err, tc.src)
				}
			})
			if allocs != 0 {
				t.Errorf("%v allocations per denial, want 0", allocs)
			}
			// One more run than asked for: AllocsPerRun warms up.
			want := []core.RefusedKey{{Key: tc.keys[0], Refusals: refused + 10_001}}
			if top := topRefused(t, l, 1); len(tc.keys) == 1 && !reflect.DeepEqual(top, want) {
				t.Errorf("TopRefused(1) = %v after the flood, want %v", top, want)
			}
		})
	}
}

// testTopRefusedBound: a flood of 100,000 distinct refused keys, each
// refused once, beside ten keys refused hundreds to thousands of times,
// from 8 goroutines: Redis never keeps more than 1,000 keys a minute, and
// the ten heavy keys still come first, each within a few refusals of its
// count. (Core's TestTopRefusedBound runs the flood on the memory store,
// and checks there, through a hook of core's own tests, that the
// limiter's sketch never counts more than its fixed number of keys.)
func testTopRefusedBound(t *testing.T, drv Driver) {
	const (
		heavy   = 10
		rounds  = 10_000
		singles = 10 // per round: 100,000 in all
	)
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name  string
		store core.Store
	}{
		{"redis", drv.New(t, srv)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			policy := "top-bound-" + tc.name
			l := testkit.Limiter(t, tc.store, testkit.Policy(policy, testkit.PerHour(1)), core.WithTimeout(testkit.StoreTimeout))
			ctx := context.Background()
			var denied [heavy]atomic.Int64
			// Heavy key i is asked for in every (i+1)th round, first of the
			// round; the first ask is admitted.
			wantHeavy := make([]core.RefusedKey, heavy)
			for i := range wantHeavy {
				wantHeavy[i] = core.RefusedKey{Key: fmt.Sprintf("heavy-%d", i), Refusals: int64((rounds+i)/(i+1)) - 1}
			}
			round := func(r int) {
				for i := range heavy {
					if r%(i+1) == 0 {
						d, err := l.Allow(ctx, wantHeavy[i].Key)
						if err != nil {
							t.Error(err)
						}
						if !d.Allowed {
							denied[i].Add(1)
						}
					}
				}
				for j := range singles {
					key := fmt.Sprintf("single-%d-%d", r, j)
					for range 2 { // admitted, then refused
						if _, err := l.Allow(ctx, key); err != nil {
							t.Error(err)
						}
					}
				}
			}
			// Flushed every 500 rounds (5,000 single keys), as the timer
			// would every 5 s at 1,000 refusals a second.
			const every = 500
			// On Redis, in parallel: the heavy keys' refusals are
			// counted by their deny-cache entries, whatever the order.
			for base := 0; base < rounds; base += every {
				var wg sync.WaitGroup
				for g := range 8 {
					wg.Go(func() {
						for r := base + g; r < base+every; r += 8 {
							round(r)
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
			for i := range heavy {
				if n := denied[i].Load(); n != wantHeavy[i].Refusals {
					t.Fatalf("%s denied %d times, want %d", wantHeavy[i].Key, n, wantHeavy[i].Refusals)
				}
			}
			all := topRefused(t, l, 1_000_000)
			// 1,000 keys a minute; the run may span a few minutes.
			if len(all) > 3*1000 {
				t.Errorf("TopRefused returned %d keys after the flood; want at most 1,000 a minute", len(all))
			}
			got := all[:min(heavy, len(all))]
			// In parallel, a refusal that reaches the sketch rather than
			// the deny cache (a denial decided while another replaced the
			// key's entry) may be pushed out of it by the flood before a
			// flush: it is lost, never added. The heavy keys come first,
			// in order, each within a few refusals of its count, never over.
			for i := range wantHeavy {
				w := wantHeavy[i]
				if i >= len(got) || got[i].Key != w.Key || got[i].Refusals > w.Refusals || got[i].Refusals < w.Refusals-2 {
					t.Errorf("the top %d after the flood = %v\nwant %v, each within 2 below", heavy, got, wantHeavy)
					break
				}
			}
		})
	}
}
