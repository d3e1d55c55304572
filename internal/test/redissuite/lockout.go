package redissuite

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// testRedisLockoutAcrossInstances: instances sharing one Redis admit
// exactly the limit under concurrency and then all refuse the key, for
// the lockout; a reset on one reaches the others' deny caches.
func testRedisLockoutAcrossInstances(t *testing.T, drv Driver) {
	const (
		limit      = 20
		instances  = 3
		goroutines = 16
		each       = 4
	)
	srv := redistest.Start(t)
	p := core.Policy{Name: "login-ip", Rules: []core.Rule{{Limit: limit, Window: time.Hour}}, Lockout: core.Lockout{For: 24 * time.Hour}}
	var locked atomic.Int64
	obs := core.ObserverFunc(func(_ context.Context, e core.Event) {
		if e.Kind == core.EventDecision && e.Decision.Locked {
			locked.Add(1)
		}
	})
	ls := make([]*core.Limiter, instances)
	for i := range ls {
		ls[i] = testkit.Limiter(t, drv.New(t, srv), p, core.WithTimeout(2*time.Second), core.WithObserver(obs))
	}
	var allowed, denied atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	begin := time.Now()
	for i := range instances * goroutines {
		wg.Go(func() {
			<-start
			for range each {
				d, err := ls[i%instances].Allow(context.Background(), "192.0.2.1")
				switch {
				case err != nil:
					t.Errorf("Allow: %v", err)
				case d.Source.Fallback():
					t.Errorf("Allow = %+v, want a decision of the store", d)
				case d.Allowed:
					allowed.Add(1)
				// A cached denial counts its age from before the store
				// call that made it: up to a call's latency shorter.
				case !d.Locked || d.RetryAfter > 24*time.Hour || d.RetryAfter < 24*time.Hour-time.Since(begin)-2*time.Second:
					t.Errorf("Allow = %+v, want admitted or locked out for 24h", d)
				default:
					denied.Add(1)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	total := int64(instances * goroutines * each)
	if allowed.Load() != limit || denied.Load() != total-limit {
		t.Fatalf("%d requests over %d instances with Limit %d: %d allowed, %d locked out; want %d and %d",
			total, instances, limit, allowed.Load(), denied.Load(), limit, total-limit)
	}
	if got := locked.Load(); got != total-limit {
		t.Errorf("observers saw %d decisions with Locked, want %d", got, total-limit)
	}

	// The lockout is one small field of the key's one hash, which lives
	// until the lockout ends.
	rdb := srv.Client(t)
	lk := drv.New(t, srv).Key(p.Name, "192.0.2.1") + ":m"
	ttl, err := rdb.PTTL(context.Background(), lk).Result()
	if err != nil || ttl <= 24*time.Hour-time.Since(begin)-time.Second || ttl > 24*time.Hour+time.Second {
		t.Errorf("PTTL %s = %v, %v; want about 24h", lk, ttl, err)
	}
	if n, err := rdb.HStrLen(context.Background(), lk, "l").Result(); err != nil || n != 24 {
		t.Errorf("HSTRLEN %s l = %d, %v; want 24", lk, n, err)
	}

	// Every instance has the lockout in its deny cache now; a reset on
	// one lifts it on all.
	for i, l := range ls {
		cachedDenial(t, l, "192.0.2.1", i)
	}
	if err := ls[1].Reset(context.Background(), "192.0.2.1"); err != nil {
		t.Fatal(err)
	}
	if n, err := rdb.Exists(context.Background(), lk).Result(); err != nil || n != 0 {
		t.Errorf("EXISTS %s after Reset = %d, %v; want 0", lk, n, err)
	}
	for i, l := range ls {
		deadline := time.Now().Add(time.Second)
		for {
			d, err := l.Allow(context.Background(), "192.0.2.1")
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("instance %d: Allow = %+v a second after Reset on instance 1, want admitted", i, d)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
}

// cachedDenial fails t unless l answers key from its deny cache within a
// second, locked out.
func cachedDenial(t *testing.T, l *core.Limiter, key string, instance int) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for {
		d, err := l.Allow(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		if d.Source == core.SourceCache {
			if !d.Locked {
				t.Errorf("instance %d: cached denial %+v, want Locked", instance, d)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("instance %d never answered %s from its deny cache: %+v", instance, key, d)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// testRedisLockoutKeys: a growing lockout keeps its offences for Max
// after it ends (the key's TTL), and a fixed one no longer than itself.
func testRedisLockoutKeys(t *testing.T, drv Driver) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	store := drv.New(t, srv)
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		lockout core.Lockout
		ttl     time.Duration
	}{
		{"fixed", core.Lockout{For: time.Minute}, time.Minute},
		{"growing", core.Lockout{For: time.Minute, Max: time.Hour}, time.Minute + time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := testkit.Limiter(t, store, core.Policy{Name: "keys-" + tc.name, Rules: []core.Rule{{Limit: 1, Window: time.Second}}, Lockout: tc.lockout},
				core.WithTimeout(2*time.Second))
			if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed {
				t.Fatalf("Allow #1 = %+v, %v", d, err)
			}
			if d, _ := l.Allow(ctx, "k"); !d.Locked {
				t.Fatalf("Allow #2 = %+v, want locked out", d)
			}
			lk := store.Key("keys-"+tc.name, "k") + ":m"
			ttl, err := rdb.PTTL(ctx, lk).Result()
			if err != nil || ttl <= tc.ttl-time.Second || ttl > tc.ttl+time.Second {
				t.Errorf("PTTL %s = %v, %v; want about %v", lk, ttl, err, tc.ttl)
			}
		})
	}
}

// testLockoutFailLocal: while Redis is down, the local fallback keeps a
// lockout of its own.
func testLockoutFailLocal(t *testing.T, drv Driver) {
	srv := redistest.Start(t)
	l := testkit.Limiter(t, drv.New(t, srv),
		core.Policy{Name: "fl", Rules: []core.Rule{{Limit: 1, Window: time.Second}}, Lockout: core.Lockout{For: time.Hour}},
		core.WithTimeout(100*time.Millisecond), core.WithBreaker(0, 0), core.WithDenyCache(0))
	srv.Stop()
	ctx := context.Background()
	if d, _ := l.Allow(ctx, "k"); !d.Allowed || d.Source != core.SourceLocal {
		t.Fatalf("Allow #1 with Redis down = %+v, want admitted by the local store", d)
	}
	time.Sleep(10 * time.Millisecond)
	for range 2 {
		if d, _ := l.Allow(ctx, "k"); d.Allowed || !d.Locked || d.Source != core.SourceLocal || d.RetryAfter <= 59*time.Minute {
			t.Fatalf("Allow with Redis down = %+v, want locked out by the local store for an hour", d)
		}
	}
}
