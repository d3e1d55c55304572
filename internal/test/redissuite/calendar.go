package redissuite

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/driver/drivertest"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// testRedisCalendarExactness: instances sharing one Redis admit exactly
// a calendar rule's limit, next to a sliding rule, under both algorithms;
// the count lives in one hash field.
func testRedisCalendarExactness(t *testing.T, drv Driver) {
	const (
		limit      = 500
		instances  = 4
		goroutines = 32
		each       = 8
	)
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	noon := drivertest.ZoneWithMidnightAt(time.Now().Truncate(time.Second).Add(12 * time.Hour))
	for _, algo := range []core.Algorithm{core.SlidingLog, core.SlidingBuckets} {
		t.Run(algo.String(), func(t *testing.T) {
			p := core.Policy{Name: "billing-" + algo.String(), Algorithm: algo,
				Rules: []core.Rule{{Limit: 10_000, Window: time.Minute}, {Limit: limit, Calendar: core.Day, Location: noon}}}
			allowed := hammerRedis(t, drv, srv, p, instances, goroutines, each, "app-1", func(d core.Decision) {
				if d.Rule != 1 {
					t.Errorf("Allow = %+v, want denied by the day's rule", d)
				}
			})
			if allowed != limit {
				t.Errorf("%d instances x %d goroutines x %d Allow with %d a day: %d allowed, want exactly %d",
					instances, goroutines, each, limit, allowed, limit)
			}
			ck := drv.New(t, srv).Key(p.Name, "app-1") + ":m"
			vals, err := rdb.HGetAll(context.Background(), ck).Result()
			if _, ok := vals["b"]; !ok || err != nil {
				t.Fatalf("HGETALL %s = %v, %v; want field b, when the key was made", ck, vals, err)
			}
			periods := periodFields(vals)
			if len(periods) != 1 {
				t.Fatalf("HGETALL %s = %v; want one period's field", ck, vals)
			}
			for f, v := range periods {
				if !strings.HasPrefix(f, "d") || v != fmt.Sprint(limit) {
					t.Errorf("HGETALL %s = %s: %s, want the day's field holding %d", ck, f, v, limit)
				}
			}
			ttl, err := rdb.PTTL(context.Background(), ck).Result()
			if err != nil || ttl < 11*time.Hour || ttl > 12*time.Hour+time.Second {
				t.Errorf("PTTL %s = %v, %v; want until the day ends, some 12h", ck, ttl, err)
			}
		})
	}
}

// testRedisCalendarKeyBounded: a key's calendar counts are one hash
// field per live period, whatever the number of periods it has seen.
func testRedisCalendarKeyBounded(t *testing.T, drv Driver) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	store := drv.New(t, srv)
	clk := drivertest.NewClock(time.Now().Add(time.Hour))
	l := testkit.Limiter(t, store, core.Policy{Name: "bounded",
		Rules: []core.Rule{{Limit: 100, Calendar: core.Day}, {Limit: 1000, Calendar: core.Month}}},
		// What Redis holds is the point: no fallback on a busy machine.
		core.WithClock(clk.Now), core.WithTimeout(10*time.Second))
	ck := store.Key("bounded", "k") + ":m"
	for day := range 70 {
		if d, err := l.Allow(context.Background(), "k"); err != nil || !d.Allowed || d.Source != core.SourceStore {
			t.Fatalf("day %d: Allow = %+v, %v", day, d, err)
		}
		vals, err := rdb.HGetAll(context.Background(), ck).Result()
		if n := len(periodFields(vals)); err != nil || n != 2 || len(vals) != 4 {
			t.Fatalf("day %d: HGETALL %s = %v, %v; want 2 periods (today's and this month's), when the key was made and its TTL", day, ck, vals, err)
		}
		clk.Add(24 * time.Hour)
	}
	if err := l.Reset(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	if n, err := rdb.Exists(context.Background(), ck).Result(); err != nil || n != 0 {
		t.Errorf("EXISTS %s after Reset = %d, %v; want 0", ck, n, err)
	}
}

// periodFields returns the calendar periods' fields of a key's hash.
func periodFields(vals map[string]string) map[string]string {
	out := map[string]string{}
	for f, v := range vals {
		if len(f) > 1 && strings.ContainsRune("dwm", rune(f[0])) && f[1] >= '0' && f[1] <= '9' {
			out[f] = v
		}
	}
	return out
}
