package redissuite

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/internal/race"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// spin keeps n goroutines busy on the CPU until the returned function is
// called: an app whose CPU is saturated, as a login server hashing every
// guess of a brute-force attack is.
func spin(n int) (stop func()) {
	var done atomic.Bool
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			x := 0
			for !done.Load() {
				for range 1000 {
					x++
				}
			}
			_ = x
		})
	}
	return func() {
		done.Store(true)
		wg.Wait()
	}
}

// testRedisSaturatedApp: a healthy Redis whose replies are read late
// because the app's own CPU is saturated is not a store failure. Two
// instances on the defaults (20 ms timeout, FailLocal) share one Redis;
// 20 accounts of limit 5 a minute each get 40 concurrent guesses split
// over the two, while goroutines spin on the CPU (GOMAXPROCS 2). Every
// decision comes from the store and no account gets a sixth guess,
// however many spinners; a decision made by the fallback from a fresh
// local window would let an account in up to twice.
//
// It measures timing against the timeout, so it runs without the race
// detector, which makes every step several times slower: `make
// test-timing` runs it in a step of its own, alone on the machine.
func testRedisSaturatedApp(t *testing.T, drv Driver) {
	if race.Enabled {
		t.Skip("timing against the timeout: make test-timing runs it without -race, in a step of its own")
	}
	const (
		accounts = 20
		guesses  = 40
		limit    = 5
	)
	srv := redistest.Start(t)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	for _, tc := range []struct {
		name     string
		spinners int
		conf     Conf
	}{
		{"idle", 0, Conf{}},
		{"2 spinners", 2, Conf{}},
		{"8 spinners", 8, Conf{}},
		// go-redis's ContextTimeoutEnabled; rueidis always honours
		// deadlines: the same as the case above.
		{"8 spinners, ContextTimeoutEnabled", 8, Conf{ContextTimeout: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := core.Policy{Name: fmt.Sprintf("load%d%v", tc.spinners, tc.conf.ContextTimeout),
				Rules: []core.Rule{{Limit: limit, Window: time.Minute}}}
			var (
				ls     [2]*core.Limiter
				stores [2]Store
				events [2]*testkit.EventCounts
			)
			for i := range ls {
				stores[i] = drv.Open(t, on(srv, tc.conf))
				events[i] = &testkit.EventCounts{}
				ls[i] = testkit.Limiter(t, stores[i], p, core.WithObserver(events[i]))
				warmLimiter(t, ls[i])
			}
			waitInstances(t, 2, p.Name, stores[:]...)
			// Instances that have been running a while: their connections
			// are open and their pools filled.
			burst(t, ls[:], "warm", accounts*guesses)
			var errsBefore [2]int
			for i, e := range events {
				errsBefore[i] = e.Count(core.EventStoreError)
			}
			stop := spin(tc.spinners)
			var (
				admitted  [accounts]atomic.Int64
				fallbacks atomic.Int64
				slowest   atomic.Int64
				wg        sync.WaitGroup
			)
			start := make(chan struct{})
			for a := range accounts {
				for g := range guesses {
					wg.Go(func() {
						<-start
						begin := time.Now()
						d, err := ls[g%2].Allow(context.Background(), fmt.Sprintf("account-%d", a))
						if lat := int64(time.Since(begin)); lat > slowest.Load() {
							slowest.Store(lat)
						}
						if err != nil {
							t.Errorf("Allow: %v", err)
							return
						}
						if d.Source != core.SourceStore && d.Source != core.SourceCache {
							fallbacks.Add(1)
						}
						if d.Allowed {
							admitted[a].Add(1)
						}
					})
				}
			}
			close(start)
			wg.Wait()
			stop()
			over := 0
			for a := range admitted {
				over += int(max(0, admitted[a].Load()-limit))
			}
			t.Logf("%d spinners: %d decisions, %d by the failure policy, %d guesses over the limit, slowest %v",
				tc.spinners, accounts*guesses, fallbacks.Load(), over, time.Duration(slowest.Load()).Round(time.Millisecond))
			if over > 0 {
				t.Errorf("%d guesses admitted over the limit of %d per account", over, limit)
			}
			if f := fallbacks.Load(); f > 0 {
				t.Errorf("%d of %d decisions made by the failure policy while Redis was healthy", f, accounts*guesses)
			}
			for i, e := range events {
				if n := e.Count(core.EventStoreError) - errsBefore[i]; n > 0 {
					t.Errorf("instance %d: %d store errors while Redis was healthy, the first: %v", i, n, e.Errs()[errsBefore[i]])
				}
			}
		})
	}
}

// warmLimiter makes one decision of l on a key of its own, so that
// connections and the script are in place before a measurement.
func warmLimiter(t *testing.T, l *core.Limiter) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		if d, err := l.Peek(ctx, "warm"); err == nil && d.Source == core.SourceStore {
			return
		} else if ctx.Err() != nil {
			t.Fatalf("warming %q: %+v, %v", l.Policy().Name, d, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitInstances waits until every store of stores counts n instances of
// policy: instances that have been running a while. A limiter on a store
// joins its fleet (driver.Fleet) when it is built; joining again from
// here returns the count it reads, and counts no one twice.
func waitInstances(t *testing.T, n int, policy string, stores ...Store) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, s := range stores {
		instances := s.Join(driver.Member{Policy: policy})
		for instances() != n {
			if time.Now().After(deadline) {
				t.Fatalf("policy %q: the store counts %d instances, want %d", policy, instances(), n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// burst makes n concurrent decisions over ls on keys of their own.
func burst(t *testing.T, ls []*core.Limiter, prefix string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if _, err := ls[i%len(ls)].Allow(context.Background(), fmt.Sprintf("%s-%d", prefix, i%100)); err != nil {
				t.Errorf("Allow: %v", err)
			}
		})
	}
	wg.Wait()
}
