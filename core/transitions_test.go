package core_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/race"
	"github.com/ratekit/ratekit/internal/redistest"
	"github.com/ratekit/ratekit/internal/testkit"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/ratekit/ratekit/rueidisstore"
)

// viaDrivers make a store of an app instance that talks to Redis at addr
// (a proxy's, for faults), one per driver.
var viaDrivers = []struct {
	name string
	new  func(t *testing.T, addr string) core.Store
}{
	{"redisstore", func(t *testing.T, addr string) core.Store {
		rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		s := redisstore.New(rdb)
		t.Cleanup(s.Close) // before the client
		return s
	}},
	{"rueidisstore", func(t *testing.T, addr string) core.Store {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableRetry: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		s := rueidisstore.New(c)
		t.Cleanup(s.Close)
		return s
	}},
}

// untilStore decides key on l until the store decides, within 10 s, and
// returns how many of those decisions admitted.
func untilStore(t *testing.T, l *core.Limiter, key string) int {
	t.Helper()
	admitted := 0
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		d, err := l.Allow(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		}
		if d.Source == core.SourceStore || d.Source == core.SourceCache {
			return admitted
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store decides nothing 10 s after it answers again (last: %+v)", d)
		}
	}
}

// TestOutageEndCounts: a fleet of one is exact through an outage and its
// end: 3 admitted by Redis, a network outage during which the local
// fallback admits the 2 left, and once Redis answers again nothing more
// in the window (7 of 5 before), on both algorithms and drivers; under
// FailOpen, what was admitted during the outage counts once Redis
// answers, so the end of the outage hands out no fresh limit.
func TestOutageEndCounts(t *testing.T) {
	for _, drv := range viaDrivers {
		for _, algo := range []core.Algorithm{core.SlidingLog, core.SlidingBuckets} {
			for _, fp := range []core.FailurePolicy{core.FailLocal, core.FailOpen} {
				t.Run(drv.name+"/"+algo.String()+"/"+fp.String(), func(t *testing.T) {
					t.Parallel()
					srv := redistest.Start(t)
					proxy := redistest.NewProxy(t, srv.Addr())
					l := testkit.Limiter(t, drv.new(t, proxy.Addr()), core.Policy{Name: "blip", Algorithm: algo,
						Rules: []core.Rule{{Limit: 5, Window: time.Minute}}},
						core.WithFailurePolicy(fp), core.WithTimeout(200*time.Millisecond), core.WithBreaker(2, 200*time.Millisecond))
					ctx := context.Background()
					admitted := 0
					for range 3 {
						if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed || d.Source != core.SourceStore {
							t.Fatalf("Allow before the outage = %+v, %v; want admitted by the store", d, err)
						}
						admitted++
					}
					proxy.SetDropping(true)
					during := 0
					for range 4 {
						d, err := l.Allow(ctx, "k")
						if err != nil || !d.Source.Fallback() {
							t.Fatalf("Allow during the outage = %+v, %v; want a fallback", d, err)
						}
						if d.Allowed {
							during++
						}
					}
					if want := map[core.FailurePolicy]int{core.FailLocal: 2, core.FailOpen: 4}[fp]; during != want {
						t.Errorf("%d admitted during the outage, want %d", during, want)
					}
					admitted += during
					proxy.SetDropping(false)
					// Until the breaker lets a call through, the failure
					// policy decides: FailLocal from the full local window,
					// FailOpen admitting; once the store decides, it counts
					// all of it.
					recovering := untilStore(t, l, "k")
					if fp == core.FailLocal && recovering != 0 {
						t.Errorf("%d admitted by the local fallback as Redis came back, want 0 (its window is full)", recovering)
					}
					after := 0
					for range 5 {
						if d, err := l.Allow(ctx, "k"); err != nil {
							t.Fatal(err)
						} else if d.Allowed {
							after++
						}
					}
					if after != 0 {
						t.Errorf("%d admitted by Redis once it answers again, want 0: what was admitted without it counts", after)
					}
					if total := admitted + recovering + after; fp == core.FailLocal && total != 5 {
						t.Errorf("%d admitted in the minute, want 5", total)
					}
				})
			}
		}
	}
}

// TestLateRepliesCount: replies that come after the timeout (Redis ran
// the calls it was sent, the fallback decided them all meanwhile) do not
// add to the limit once replies come on time again: a fleet of one admits
// at most 5 of 5 (6 before, 8 with six late calls). What the fallback
// admitted counts once Redis answers, so that a call Redis ran too counts
// twice: the outcome of a call without a reply is unknown, and counting
// it can only under-admit.
func TestLateRepliesCount(t *testing.T) {
	for _, drv := range viaDrivers {
		for _, late := range []int{3, 6} {
			t.Run(fmt.Sprintf("%s/%d late", drv.name, late), func(t *testing.T) {
				t.Parallel()
				srv := redistest.Start(t)
				proxy := redistest.NewProxy(t, srv.Addr())
				l := testkit.Limiter(t, drv.new(t, proxy.Addr()), core.Policy{Name: "late", Rules: []core.Rule{{Limit: 5, Window: time.Minute}}},
					core.WithTimeout(100*time.Millisecond), core.WithBreaker(0, 0))
				ctx := context.Background()
				admitted := 0
				proxy.SetLatency(400 * time.Millisecond) // replies late: Redis runs the calls it is sent
				for range late {
					if d, _ := l.Allow(ctx, "k"); d.Allowed {
						admitted++
					}
				}
				proxy.SetLatency(0)
				time.Sleep(600 * time.Millisecond) // the late replies are in
				for range 8 {
					d, err := l.Allow(ctx, "k")
					if err != nil {
						t.Fatal(err)
					}
					if d.Allowed {
						admitted++
					}
				}
				if admitted > 5 {
					t.Errorf("%d admitted in the minute, want at most 5", admitted)
				}
			})
		}
	}
}

// heard waits until a, which denied marker from its deny cache, hears the
// reset of marker that b makes now: invalidations come in order on a
// store's channel, so a's store has heard every one b's published before.
// a and b limit marker to 1 an hour.
func heard(t *testing.T, a, b *core.Limiter) {
	t.Helper()
	ctx := context.Background()
	for range 2 {
		_, _ = a.Allow(ctx, "marker")
	}
	if d, _ := a.Allow(ctx, "marker"); d.Source != core.SourceCache {
		t.Fatalf("marker denied from %v, want the deny cache", d.Source)
	}
	if err := b.Reset(ctx, "marker"); err != nil {
		t.Fatal(err)
	}
	testkit.WaitUntil(t, "the marker's reset heard", func() bool {
		d, _ := a.Peek(ctx, "marker")
		return d.Allowed
	})
	testkit.WaitUntil(t, "the marker's cached denial dropped", func() bool {
		d, _ := a.Allow(ctx, "marker")
		return d.Source != core.SourceCache
	})
}

// TestResetReachesFallback: a key reset on one instance is forgotten by
// every instance's fallback window too, and a pass given on one is
// honoured by every instance's fallback: in an outage that follows, the
// user gets each instance's share again (0 before), and is not
// challenged where it passed.
func TestResetReachesFallback(t *testing.T) {
	for _, drv := range viaDrivers {
		t.Run(drv.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			proxy := redistest.NewProxy(t, srv.Addr())
			login := core.Policy{Name: "login", Rules: []core.Rule{{Limit: 4, Window: time.Hour}}}
			captcha := core.Policy{Name: "captcha", Rules: []core.Rule{{Limit: 4, Window: time.Hour, Challenge: 2}}}
			marker := core.Policy{Name: "marker", Rules: []core.Rule{{Limit: 1, Window: time.Hour}}}
			opts := []core.Option{core.WithTimeout(200 * time.Millisecond), core.WithBreaker(0, 0)}
			storeA, storeB := drv.new(t, proxy.Addr()), drv.new(t, srv.Addr())
			loginA, loginB := testkit.Limiter(t, storeA, login, opts...), testkit.Limiter(t, storeB, login, opts...)
			captchaA, captchaB := testkit.Limiter(t, storeA, captcha, opts...), testkit.Limiter(t, storeB, captcha, opts...)
			testkit.WaitUntil(t, "both instances counted", func() bool { return core.Instances(loginA) == 2 && core.Instances(captchaA) == 2 })
			ctx := context.Background()
			for range 2 {
				if d, _ := loginA.Allow(ctx, "alice"); !d.Allowed {
					t.Fatalf("Allow(alice) on a = %+v, want admitted", d)
				}
			}
			if err := loginB.Reset(ctx, "alice"); err != nil {
				t.Fatal(err)
			}
			if err := captchaB.Pass(ctx, "bob"); err != nil {
				t.Fatal(err)
			}
			heard(t, testkit.Limiter(t, storeA, marker, opts...), testkit.Limiter(t, storeB, marker, opts...))
			proxy.SetDropping(true)
			// a's share of each limit is 2, and of the challenge 1.
			count := func(l *core.Limiter, key string) (admitted, challenged int) {
				for range 3 {
					d, err := l.Allow(ctx, key)
					if err != nil || d.Source != core.SourceLocal {
						t.Fatalf("Allow(%s) in the outage = %+v, %v; want a local decision", key, d, err)
					}
					if d.Allowed {
						admitted++
					}
					if d.Challenged {
						challenged++
					}
				}
				return admitted, challenged
			}
			if got, _ := count(loginA, "alice"); got != 2 {
				t.Errorf("a's fallback admitted alice %d times after b reset her, want 2 (a's share)", got)
			}
			if got, ch := count(captchaA, "bob"); got != 2 || ch != 0 {
				t.Errorf("a's fallback admitted bob %d times, challenged %d, after b's pass; want 2 and none", got, ch)
			}
			if _, ch := count(captchaA, "carol"); ch == 0 {
				t.Errorf("a's fallback challenged carol, who passed nothing, 0 times; want her challenged")
			}
		})
	}
}

// TestResetThroughBreaker: Reset and Pass go through the circuit breaker
// as decisions do: with the breaker open they call no store (no store
// error, no timeout to wait), hold in this instance at once, say so, and
// reach the store once it answers, before its next decision of the key.
func TestResetThroughBreaker(t *testing.T) {
	for _, drv := range viaDrivers {
		t.Run(drv.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			proxy := redistest.NewProxy(t, srv.Addr())
			ev := &testkit.Events{}
			l := testkit.Limiter(t, drv.new(t, proxy.Addr()), core.Policy{Name: "login",
				Rules: []core.Rule{{Limit: 5, Window: time.Hour, Challenge: 4}}},
				core.WithTimeout(200*time.Millisecond), core.WithBreaker(2, 300*time.Millisecond), core.WithObserver(ev))
			ctx := context.Background()
			for range 3 {
				if d, _ := l.Allow(ctx, "k"); !d.Allowed || d.Source != core.SourceStore {
					t.Fatalf("Allow = %+v, want admitted by the store", d)
				}
			}
			proxy.SetDropping(true)
			for range 2 { // opens the breaker
				_, _ = l.Allow(ctx, "other")
			}
			if ev.Count(core.EventBreakerOpen) != 1 {
				t.Fatalf("breaker opened %d times, want once", ev.Count(core.EventBreakerOpen))
			}
			errs := ev.Count(core.EventStoreError)
			if err := l.Reset(ctx, "k"); err == nil || !strings.Contains(err.Error(), "circuit breaker is open") {
				t.Errorf("Reset with the breaker open = %v, want an error saying the store did not take it", err)
			}
			if err := l.Pass(ctx, "k"); err == nil || !strings.Contains(err.Error(), "circuit breaker is open") {
				t.Errorf("Pass with the breaker open = %v, want an error saying the store did not take it", err)
			}
			if n := ev.Count(core.EventStoreError); n != errs {
				t.Errorf("%d store errors with the breaker open, want none: Reset and Pass call no store", n-errs)
			}
			proxy.SetDropping(false)
			srv.Do(t, "PING")
			// The reset and the pass hold here until the store takes them,
			// before its next decision of the key: 5 admitted after the
			// reset, wherever decided, none challenged, then denied by
			// Redis.
			got := 0
			for deadline := time.Now().Add(10 * time.Second); ; {
				d, err := l.Allow(ctx, "k")
				if err != nil {
					t.Fatal(err)
				}
				if d.Challenged {
					t.Fatalf("Allow(k) after the pass = %+v, want not challenged", d)
				}
				if d.Allowed {
					got++
				}
				if !d.Allowed && d.Source == core.SourceStore || time.Now().After(deadline) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if got != 5 {
				t.Errorf("%d admitted after the reset until Redis denied, want 5", got)
			}
		})
	}
}

// TestRedisFrozenSaturatedApp: a Redis that does not answer (paused)
// behind an app whose CPU is saturated costs a decision at most ten
// timeouts (200 ms at the default 20 ms) more than a decision of a Redis
// that answers costs in the same saturated process, at the 99th
// percentile (1.02 to 1.21 s in all before): the limiter asks whether a
// reply waits unread in a socket rather than how busy its scheduler is. Timed against
// the timeout: make test runs it alone.
func TestRedisFrozenSaturatedApp(t *testing.T) {
	if testing.Short() {
		t.Skip("Redis-backed")
	}
	if race.Enabled {
		t.Skip("timing against the timeout: make test runs it without -race, in a step of its own")
	}
	srv := redistest.Start(t)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	p := core.Policy{Name: "frozen", Rules: []core.Rule{{Limit: 1000, Window: time.Minute}}}
	frozen := testkit.Limiter(t, redisstore.New(rdb), p, core.WithBreaker(0, 0))
	ctx := context.Background()
	for i := range 200 { // warm: connections open, pool filled
		if _, err := frozen.Allow(ctx, fmt.Sprint("warm", i%20)); err != nil {
			t.Fatal(err)
		}
	}
	// p99 returns the 99th percentile of the latencies of 16 goroutines
	// deciding on l for d, those decided by the store left out when
	// fallbacks is set.
	p99 := func(l *core.Limiter, d time.Duration, fallbacks bool) time.Duration {
		var (
			mu   sync.Mutex
			lats []time.Duration
			wg   sync.WaitGroup
		)
		deadline := time.Now().Add(d)
		for g := range 16 {
			wg.Go(func() {
				for i := 0; time.Now().Before(deadline); i++ {
					begin := time.Now()
					dec, err := l.Allow(ctx, fmt.Sprint("user", g, "-", i%5))
					lat := time.Since(begin)
					if err != nil {
						t.Error(err)
						return
					}
					if fallbacks && !dec.Source.Fallback() {
						continue // answered before the pause began
					}
					mu.Lock()
					lats = append(lats, lat)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		slices.Sort(lats)
		if len(lats) < 50 {
			t.Fatalf("%d decisions, want at least 50", len(lats))
		}
		return lats[len(lats)*99/100]
	}
	stop := spin(8)
	defer stop()
	busy := p99(frozen, time.Second, false)
	srv.Pause(4 * time.Second)
	got := p99(frozen, 2*time.Second, true)
	stop()
	t.Logf("p99 with the CPU saturated: %v with Redis answering, %v by the failure policy with Redis paused", busy, got)
	if bound := busy + 10*core.DefaultTimeout + 50*time.Millisecond; got > bound {
		t.Errorf("p99 %v with Redis paused behind a saturated app, want at most %v: ten timeouts more than with Redis answering", got, bound)
	}
}

// TestOutageEndFleet: a fleet of two stays within the outage's bound
// through the recovery: 2 admitted by Redis, an outage during which each
// instance admits what is left of its share (2 of 4 each, less its own
// admission through Redis), and nothing more once Redis answers: 4 of 4
// in all (6 before, the end of the outage handing out the limit afresh).
func TestOutageEndFleet(t *testing.T) {
	for _, drv := range viaDrivers {
		t.Run(drv.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			p := core.Policy{Name: "fleet", Rules: []core.Rule{{Limit: 4, Window: time.Minute}}}
			var (
				proxies [2]*redistest.Proxy
				ls      [2]*core.Limiter
			)
			for i := range ls {
				proxies[i] = redistest.NewProxy(t, srv.Addr())
				ls[i] = testkit.Limiter(t, drv.new(t, proxies[i].Addr()), p,
					core.WithTimeout(200*time.Millisecond), core.WithBreaker(2, 200*time.Millisecond))
			}
			testkit.WaitUntil(t, "both instances counted", func() bool { return core.Instances(ls[0]) == 2 && core.Instances(ls[1]) == 2 })
			ctx := context.Background()
			admitted := 0
			for _, l := range ls {
				if d, _ := l.Allow(ctx, "k"); d.Allowed {
					admitted++
				}
			}
			for _, px := range proxies {
				px.SetDropping(true)
			}
			for _, l := range ls {
				for range 3 {
					if d, _ := l.Allow(ctx, "k"); d.Allowed {
						admitted++
					}
				}
			}
			for _, px := range proxies {
				px.SetDropping(false)
			}
			for _, l := range ls {
				admitted += untilStore(t, l, "k")
				for range 3 {
					if d, _ := l.Allow(ctx, "k"); d.Allowed {
						admitted++
					}
				}
			}
			if admitted != 4 {
				t.Errorf("%d admitted in the minute by a fleet of two, want 4", admitted)
			}
		})
	}
}

// TestRefusedFlushTimedOut: refusals added to Redis by a flush whose
// reply came after its timeout are not added again: the top refused keys
// count them once (twice before), a lower bound as the docs promise.
func TestRefusedFlushTimedOut(t *testing.T) {
	for _, drv := range viaDrivers {
		t.Run(drv.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			l := testkit.Limiter(t, drv.new(t, srv.Addr()), core.Policy{Name: "top", Rules: []core.Rule{{Limit: 1, Window: time.Hour}}},
				core.WithTimeout(time.Second))
			ctx := context.Background()
			for range 11 {
				if _, err := l.Allow(ctx, "mallory"); err != nil {
					t.Fatal(err)
				}
			}
			// Writes wait: the flush's transaction runs once the pause
			// ends, after the flush timed out.
			srv.Do(t, "CLIENT", "PAUSE", 500, "WRITE")
			fctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			err := core.FlushRefused(fctx, l)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("FlushRefused with writes paused = %v, want a timeout", err)
			}
			time.Sleep(600 * time.Millisecond) // the late flush has run
			top, err := l.TopRefused(ctx, 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(top) != 1 || top[0].Refusals != 10 {
				t.Errorf("TopRefused = %v, want mallory refused 10 times", top)
			}
		})
	}
}
