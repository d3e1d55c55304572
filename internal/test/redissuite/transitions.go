package redissuite

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

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/core/driver/drivertest"
	"github.com/ratekit/ratekit/internal/race"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// The transitions of production, on every driver: the end of an outage,
// late replies, a reset or a pass while Redis fails, instances that use one
// policy name differently, a store closed by a reload, and the function
// libraries of earlier releases.

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

// warmed returns s once a decision on it has dialled its connection and
// loaded its library, within testkit.StoreTimeout: so that the first
// decision of a test's limiter, with a timeout of milliseconds, is not
// the one that pays for them on a loaded machine.
func warmed[S core.Store](t *testing.T, s S) S {
	t.Helper()
	l := testkit.Limiter(t, s, testkit.Policy("warm-up", testkit.PerHour(1)), core.WithTimeout(testkit.StoreTimeout))
	if d, err := l.Allow(context.Background(), "warm-up"); err != nil || d.Source != core.SourceStore {
		t.Fatalf("warming the store: Allow = %+v, %v; want a decision of the store", d, err)
	}
	return s
}

// OutageEndCounts: a fleet of one is exact through an outage and its
// end: 3 admitted by Redis, a network outage during which the local
// fallback admits the 2 left, and once Redis answers again nothing more
// in the window (7 of 5 before), on both algorithms and drivers; under
// FailOpen, what was admitted during the outage counts once Redis
// answers, so the end of the outage hands out no fresh limit.
func testOutageEndCounts(t *testing.T, drv Driver) {
	for _, algo := range []core.Algorithm{core.SlidingLog, core.SlidingBuckets} {
		for _, fp := range []core.FailurePolicy{core.FailLocal, core.FailOpen} {
			t.Run(algo.String()+"/"+fp.String(), func(t *testing.T) {
				t.Parallel()
				srv := redistest.Start(t)
				proxy := redistest.NewProxy(t, srv.Addr())
				store := warmed(t, drv.Open(t, Conf{Addrs: []string{proxy.Addr()}, NoRetry: true}))
				l := testkit.Limiter(t, store, core.Policy{Name: "blip", Algorithm: algo,
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

// LateRepliesCount: replies that come after the timeout (Redis ran
// the calls it was sent, the fallback decided them all meanwhile) do not
// add to the limit once replies come on time again: a fleet of one admits
// at most 5 of 5 (6 before, 8 with six late calls). What the fallback
// admitted counts once Redis answers, so that a call Redis ran too counts
// twice: the outcome of a call without a reply is unknown, and counting
// it can only under-admit.
func testLateRepliesCount(t *testing.T, drv Driver) {
	for _, late := range []int{3, 6} {
		t.Run(fmt.Sprintf("%d late", late), func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			proxy := redistest.NewProxy(t, srv.Addr())
			l := testkit.Limiter(t, warmed(t, drv.Open(t, Conf{Addrs: []string{proxy.Addr()}, NoRetry: true})), core.Policy{Name: "late", Rules: []core.Rule{{Limit: 5, Window: time.Minute}}},
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

// instances returns how many instances s counts of policy, which a
// limiter on s uses: joining again counts no one twice.
func instances(s Store, policy string) int {
	return s.Join(driver.Member{Policy: policy})()
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

// ResetReachesFallback: a key reset on one instance is forgotten by
// every instance's fallback window too, and a pass given on one is
// honoured by every instance's fallback: in an outage that follows, the
// user gets each instance's share again (0 before), and is not
// challenged where it passed.
func testResetReachesFallback(t *testing.T, drv Driver) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	login := core.Policy{Name: "login", Rules: []core.Rule{{Limit: 4, Window: time.Hour}}}
	captcha := core.Policy{Name: "captcha", Rules: []core.Rule{{Limit: 4, Window: time.Hour, Challenge: 2}}}
	marker := core.Policy{Name: "marker", Rules: []core.Rule{{Limit: 1, Window: time.Hour}}}
	opts := []core.Option{core.WithTimeout(200 * time.Millisecond), core.WithBreaker(0, 0)}
	storeA, storeB := warmed(t, drv.Open(t, Conf{Addrs: []string{proxy.Addr()}, NoRetry: true})), warmed(t, drv.Open(t, Conf{Addrs: []string{srv.Addr()}, NoRetry: true}))
	loginA, loginB := testkit.Limiter(t, storeA, login, opts...), testkit.Limiter(t, storeB, login, opts...)
	captchaA, captchaB := testkit.Limiter(t, storeA, captcha, opts...), testkit.Limiter(t, storeB, captcha, opts...)
	testkit.WaitUntil(t, "both instances counted", func() bool { return instances(storeA, "login") == 2 && instances(storeA, "captcha") == 2 })
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
}

// ResetThroughBreaker: Reset and Pass go through the circuit breaker
// as decisions do: with the breaker open they call no store (no store
// error, no timeout to wait), hold in this instance at once, say so, and
// reach the store once it answers, before its next decision of the key.
func testResetThroughBreaker(t *testing.T, drv Driver) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	ev := &testkit.Events{}
	l := testkit.Limiter(t, warmed(t, drv.Open(t, Conf{Addrs: []string{proxy.Addr()}, NoRetry: true})), core.Policy{Name: "login",
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
}

// RedisFrozenSaturatedApp: a Redis that does not answer (paused)
// behind an app whose CPU is saturated costs a decision at most ten
// timeouts (200 ms at the default 20 ms) more than a decision of a Redis
// that answers costs in the same saturated process, at the 99th
// percentile (1.02 to 1.21 s in all before): the limiter asks whether a
// reply waits unread in a socket rather than how busy its scheduler is.
// A store that cannot tell (Driver.Replies unset: rueidis does not show
// its connections) waits as for a Redis that answers late: at most a
// second past the timeout. Timed against the timeout: make test-timing
// runs it alone.
func testRedisFrozenSaturatedApp(t *testing.T, drv Driver) {
	if race.Enabled {
		t.Skip("timing against the timeout: make test-timing runs it without -race, in a step of its own")
	}
	srv := redistest.Start(t)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	p := core.Policy{Name: "frozen", Rules: []core.Rule{{Limit: 1000, Window: time.Minute}}}
	frozen := testkit.Limiter(t, drv.New(t, srv), p, core.WithBreaker(0, 0))
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
		if len(lats) < 16 {
			t.Fatalf("%d decisions (by the failure policy only: %v), want at least 16", len(lats), fallbacks)
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
	bound, what := busy+10*defaultTimeout+50*time.Millisecond, "ten timeouts"
	if !drv.Replies {
		bound, what = busy+defaultTimeout+time.Second+50*time.Millisecond, "a timeout and a second"
	}
	if got > bound {
		t.Errorf("p99 %v with Redis paused behind a saturated app, want at most %v: %s more than with Redis answering", got, bound, what)
	}
}

// fleetOfTwo returns two instances limiting by p on srv, each through a
// proxy of its own (timeout 200 ms, breaker 2 failures / 200 ms), once
// each counts the other.
func fleetOfTwo(t *testing.T, drv Driver, srv *redistest.Server, p core.Policy) ([2]*redistest.Proxy, [2]*core.Limiter) {
	t.Helper()
	var (
		proxies [2]*redistest.Proxy
		stores  [2]Store
		ls      [2]*core.Limiter
	)
	for i := range ls {
		proxies[i] = redistest.NewProxy(t, srv.Addr())
		stores[i] = drv.Open(t, Conf{Addrs: []string{proxies[i].Addr()}, NoRetry: true})
		ls[i] = testkit.Limiter(t, stores[i], p,
			core.WithTimeout(200*time.Millisecond), core.WithBreaker(2, 200*time.Millisecond))
	}
	testkit.WaitUntil(t, "both instances counted", func() bool { return instances(stores[0], p.Name) == 2 && instances(stores[1], p.Name) == 2 })
	return proxies, ls
}

// OutageEndFleet: a fleet of two stays within the outage's bound
// through the recovery: 2 admitted by Redis, an outage during which each
// instance admits what is left of its share (2 of 4 each, less its own
// admission through Redis), and nothing more once Redis answers: 4 of 4
// in all (6 before, the end of the outage handing out the limit afresh).
func testOutageEndFleet(t *testing.T, drv Driver) {
	t.Parallel()
	srv := redistest.Start(t)
	p := core.Policy{Name: "fleet", Rules: []core.Rule{{Limit: 4, Window: time.Minute}}}
	proxies, ls := fleetOfTwo(t, drv, srv, p)
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
}

// OutageEndDenied: a key that the store denied before an outage stays
// denied through the grace after it, as during the outage. Instance 0
// has "hot" denied, then Redis forgets hot's window (an empty restart,
// for that key); instance 1 sees the store first, its grace ends, and it
// takes hot's limit from the store. Instance 0, in its grace, denied hot
// from its deny cache: 4 of 4 in all (5 before, its grace admitting hot
// by its share before it had told the store).
func testOutageEndDenied(t *testing.T, drv Driver) {
	t.Parallel()
	srv := redistest.Start(t)
	p := core.Policy{Name: "grace", Rules: []core.Rule{{Limit: 4, Window: time.Minute}}}
	proxies, ls := fleetOfTwo(t, drv, srv, p)
	ctx := context.Background()
	setup := testkit.Limiter(t, drv.New(t, srv), p, core.WithTimeout(5*time.Second), core.WithDenyCache(0))
	for i := range 4 {
		if d, err := setup.Allow(ctx, "hot"); err != nil || !d.Allowed {
			t.Fatalf("Allow(hot) #%d = %+v, %v; want admitted", i+1, d, err)
		}
	}
	if d, err := ls[0].Allow(ctx, "hot"); err != nil || d.Allowed || d.Source != core.SourceStore {
		t.Fatalf("instance 0: Allow(hot) over the limit = %+v, %v; want denied by the store", d, err)
	}
	for _, px := range proxies {
		px.SetDropping(true)
	}
	for _, l := range ls {
		for range 3 {
			if _, err := l.Allow(ctx, "other"); err != nil {
				t.Fatal(err)
			}
		}
	}
	srv.Do(t, "DEL", drv.New(t, srv).Key(p.Name, "hot"))
	proxies[1].SetDropping(false)
	untilStore(t, ls[1], "other") // through instance 1's grace
	proxies[0].SetDropping(false)
	time.Sleep(300 * time.Millisecond) // instance 0's breaker cool-down
	admitted := 0
	for i := range 2 {
		d, err := ls[0].Allow(ctx, "hot")
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed || d.Source != core.SourceCache {
			t.Errorf("instance 0: Allow(hot) #%d in the grace = %+v; want denied from the deny cache", i+1, d)
		}
		if d.Allowed {
			admitted++
		}
	}
	for range 5 {
		if d, _ := ls[1].Allow(ctx, "hot"); d.Allowed {
			admitted++
		}
	}
	if admitted != 4 {
		t.Errorf("%d admitted in the minute by a fleet of two, want 4", admitted)
	}
}

// RefusedFlushTimedOut: refusals added to Redis by a flush whose
// reply came after its timeout are not added again: the top refused keys
// count them once (twice before), a lower bound as the docs promise.
func testRefusedFlushTimedOut(t *testing.T, drv Driver) {
	t.Parallel()
	srv := redistest.Start(t)
	l := testkit.Limiter(t, drv.Open(t, Conf{Addrs: []string{srv.Addr()}, NoRetry: true}), core.Policy{Name: "top", Rules: []core.Rule{{Limit: 1, Window: time.Hour}}},
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
	_, err := l.TopRefused(fctx, 10) // adds the refusals first
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TopRefused with writes paused = %v, want a timeout", err)
	}
	time.Sleep(600 * time.Millisecond) // the late flush has run
	top, err := l.TopRefused(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(top) != 1 || top[0].Refusals != 10 {
		t.Errorf("TopRefused = %v, want mallory refused 10 times", top)
	}
}

// diffEvents records the EventRulesDiffer events a limiter reports.
type diffEvents struct {
	mu   sync.Mutex
	errs []error
}

func (d *diffEvents) Observe(_ context.Context, e core.Event) {
	if e.Kind == core.EventRulesDiffer {
		d.mu.Lock()
		d.errs = append(d.errs, e.Err)
		d.mu.Unlock()
	}
}

// last returns how many events came, and the latest one's error.
func (d *diffEvents) last() (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.errs) == 0 {
		return 0, nil
	}
	return len(d.errs), d.errs[len(d.errs)-1]
}

// FleetRulesDiffer: two instances that use one policy name with
// different rules (a 5 per second and a 20 per minute) are each told, at
// start by Limiter.Check and by an EventRulesDiffer event naming the other
// configuration, and told again when they agree (the other instance's
// store closed), after which Check passes.
func testFleetRulesDiffer(t *testing.T, drv Driver) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	var evA, evB diffEvents
	a := testkit.Limiter(t, drv.New(t, srv), core.Policy{Name: "login", Rules: []core.Rule{{Limit: 5, Window: time.Second}}},
		core.WithObserver(&evA))
	storeB := drv.New(t, srv)
	b := testkit.Limiter(t, storeB, core.Policy{Name: "login", Rules: []core.Rule{{Limit: 20, Window: time.Minute}}},
		core.WithObserver(&evB))
	same := testkit.Limiter(t, drv.New(t, srv), core.Policy{Name: "other", Rules: []core.Rule{{Limit: 5, Window: time.Second}}})
	_ = testkit.Limiter(t, drv.New(t, srv), core.Policy{Name: "other", Rules: []core.Rule{{Limit: 5, Window: time.Second}}})

	// Each Check announces its instance and reads the others'; a Join's
	// own announcement runs in the background and may land later, so A
	// checks again once B's Check has announced B.
	_ = a.Check(ctx)
	errB := b.Check(ctx)
	errA := a.Check(ctx)
	for name, err := range map[string]error{"a": errA, "b": errB} {
		if err == nil || errors.Is(err, core.ErrMisconfigured) || !strings.Contains(err.Error(), "other configuration") {
			t.Errorf("%s.Check() = %v, want an error naming the other configuration, not ErrMisconfigured", name, err)
		}
	}
	if err := same.Check(ctx); err != nil {
		t.Errorf("Check() of a policy every instance configures alike = %v, want nil", err)
	}
	for name, ev := range map[string]*diffEvents{"a": &evA, "b": &evB} {
		if n, err := ev.last(); err == nil || n == 0 {
			t.Errorf("%s: EventRulesDiffer %v (%d events), want one with an error", name, err, n)
		}
	}

	// B's instance goes: A hears that every instance agrees again, at
	// once if B's Close withdrew its announcement, else once it expired
	// (six seconds after its last) and A announced again (every two):
	// eight seconds, and a loaded machine's slack.
	storeB.Close()
	testkit.WaitUntilWithin(t, 30*time.Second, "A hears that the instances agree", func() bool {
		n, err := evA.last()
		return n >= 2 && err == nil
	})
	if err := a.Check(ctx); err != nil {
		t.Errorf("a.Check() once B closed = %v, want nil", err)
	}
}

// FleetKeepsLongestWindow: instances that use one policy name with
// different rules (a 5 per second beside a 20 per minute, as in a deploy
// that changes a window) do not trim away what the other counts: the
// instance of 20 a minute admits 20 in the minute, those the other
// admitted included, on both algorithms and drivers, while the other
// keeps its own 5 a second.
func testFleetKeepsLongestWindow(t *testing.T, drv Driver) {
	for _, algo := range []core.Algorithm{core.SlidingLog, core.SlidingBuckets} {
		t.Run(algo.String(), func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			ctx := context.Background()
			clock := drivertest.NewClock(time.Unix(1_900_000_000, 0))
			fastStore, slowStore := drv.New(t, srv), drv.New(t, srv)
			fast := testkit.Limiter(t, fastStore, core.Policy{Name: "deploy", Algorithm: algo, Buckets: 10,
				Rules: []core.Rule{{Limit: 5, Window: time.Second}}}, core.WithClock(clock.Now))
			slow := testkit.Limiter(t, slowStore, core.Policy{Name: "deploy", Algorithm: algo, Buckets: 10,
				Rules: []core.Rule{{Limit: 20, Window: time.Minute}}}, core.WithClock(clock.Now))
			// Both have read each other's announcement (a Check of the
			// first may read the fleet before the second announced: an
			// instance learns of a new one within an announcement, 2 s).
			_, _ = fast.Check(ctx), slow.Check(ctx)
			testkit.WaitUntil(t, "both instances counted by both", func() bool {
				return instances(fastStore, "deploy") == 2 && instances(slowStore, "deploy") == 2
			})

			admitted := 0
			for range 3 { // three seconds of the fast instance's limit
				for range 6 {
					if d, err := fast.Allow(ctx, "k"); err != nil {
						t.Fatal(err)
					} else if d.Allowed {
						admitted++
					}
				}
				clock.Add(1100 * time.Millisecond)
			}
			if admitted != 15 {
				t.Fatalf("the 5-per-second instance admitted %d in 3 seconds, want 15", admitted)
			}
			for range 10 {
				if d, err := slow.Allow(ctx, "k"); err != nil {
					t.Fatal(err)
				} else if d.Allowed {
					admitted++
				}
			}
			if admitted != 20 {
				t.Errorf("%d admitted within a minute between both instances, want 20 (the 20-per-minute rule holds)", admitted)
			}
		})
	}
}

// FleetCloseWithdraws: a store closed (a configuration reload that
// builds a new one) withdraws its instance's announcements at once, so
// that the fleet counts one instance fewer from the next announcement on,
// not for as long as the process runs.
func testFleetCloseWithdraws(t *testing.T, drv Driver) {
	t.Parallel()
	srv := redistest.Start(t)
	p := core.Policy{Name: "reload", Rules: []core.Rule{{Limit: 10, Window: time.Minute}}}
	kept := drv.New(t, srv)
	testkit.Limiter(t, kept, p)
	var dropped []Store
	for range 3 { // three reloads, each store closed
		s := drv.New(t, srv)
		testkit.Limiter(t, s, p)
		dropped = append(dropped, s)
	}
	testkit.WaitUntil(t, "4 instances counted", func() bool { return instances(kept, "reload") == 4 })
	for _, s := range dropped {
		s.Close()
	}
	t.Logf("members: %v", srv.Do(t, "ZRANGE", "ratekit:reload:fleet", 0, -1))
	if n := srv.Do(t, "ZCARD", "ratekit:reload:fleet"); n != int64(1) {
		t.Errorf("fleet key holds %v announcements once the 3 stores closed, want 1", n)
	}
	testkit.WaitUntil(t, "1 instance counted", func() bool { return instances(kept, "reload") == 1 })
}

// PruneLibraries: the first store of a release to load its function
// library into a Redis deletes the libraries of ratekit no live instance
// runs (an earlier release's), and keeps v0.1.0's while one of its
// instances announces itself, and another program's always.
func testPruneLibraries(t *testing.T, drv Driver) {
	const (
		gone   = "ratekit_0123456789ab" // a release whose instances stopped
		legacy = "ratekit_2e60b0f5e3d1" // v0.1.0's, with an instance alive
		other  = "mylib"
	)
	t.Parallel()
	srv := redistest.Start(t)
	for _, lib := range []string{gone, legacy, other} {
		srv.Do(t, "FUNCTION", "LOAD", "#!lua name="+lib+"\nredis.register_function('"+lib+"_f', function() return 1 end)")
	}
	srv.Do(t, "ZADD", "app:login:fleet", time.Now().Add(time.Minute).UnixMilli(), "v010instance") // v0.1.0's announcement
	l := testkit.Limiter(t, drv.New(t, srv), core.Policy{Name: "p", Rules: []core.Rule{{Limit: 1, Window: time.Minute}}})
	if _, err := l.Allow(context.Background(), "k"); err != nil { // loads the library
		t.Fatal(err)
	}
	testkit.WaitUntil(t, "the unused library deleted", func() bool {
		return !strings.Contains(fmt.Sprint(srv.Do(t, "FUNCTION", "LIST")), gone)
	})
	list := fmt.Sprint(srv.Do(t, "FUNCTION", "LIST"))
	for _, lib := range []string{legacy, other} {
		if !strings.Contains(list, lib) {
			t.Errorf("FUNCTION LIST %s: %s deleted, want it kept", list, lib)
		}
	}
}
