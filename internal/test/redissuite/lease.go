package redissuite

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// testInFlightExact: instances × goroutines asking for one key never have
// more than K requests in flight, measured inside the "handler" (between
// the admission and its refund); they do reach K; and every lease is
// released at the end.
func testInFlightExact(t *testing.T, drv Driver) {
	t.Parallel()
	for _, b := range []testkit.Backend{fleetBackend(drv), clusterFleetBackend(drv)} {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			testkit.InFlightExact(t, b)
		})
	}
}

// testInFlightDeadInstance: the leases of an instance that dies
// mid-request (its Redis client gone, so no renewal and no release) come
// back exactly LeaseTTL after they were last renewed, on one Redis and on
// a Cluster.
func testInFlightDeadInstance(t *testing.T, drv Driver) {
	t.Parallel()
	for _, b := range []struct {
		name string
		conf func(t *testing.T) Conf // where the instances connect
	}{
		{"redis", func(t *testing.T) Conf { return on(redistest.Start(t), Conf{}) }},
		{"cluster", func(t *testing.T) Conf { return onCluster(redistest.StartCluster(t), Conf{}) }},
	} {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			const (
				k   = 3
				ttl = 2 * time.Second
			)
			now, step := testkit.PastClock()
			obs := &testkit.EventCounts{}
			p := core.Policy{Name: "dead-" + b.name, InFlight: k, LeaseTTL: ttl}
			conf := b.conf(t)
			deadStore, closeClient := drv.Connect(t, conf)
			dead := testkit.Limiter(t, deadStore, p, core.WithClock(now), core.WithTimeout(5*time.Second), core.WithObserver(obs))
			alive := testkit.Limiter(t, drv.Open(t, conf), p, core.WithClock(now), core.WithTimeout(5*time.Second))
			ctx := context.Background()
			var held []core.Decision
			for i := range k {
				d, err := dead.Allow(ctx, "export")
				if err != nil || !d.Allowed || d.Remaining != int64(k-1-i) {
					t.Fatalf("dead instance: Allow #%d = %+v, %v", i+1, d, err)
				}
				held = append(held, d)
			}
			// The instance dies with its requests in flight.
			closeClient()
			t.Cleanup(func() {
				// Its releases fail; the limiter gives them up after ttl.
				for i := range held {
					_ = held[i].Refund(ctx)
				}
			})
			step(ttl - time.Microsecond)
			if d, _ := alive.Allow(ctx, "export"); d.Allowed || d.Remaining != 0 || d.RetryAfter != time.Second {
				t.Fatalf("1µs before the TTL: Allow = %+v, want denied with the 1s hint", d)
			}
			step(time.Microsecond)
			for i := range k {
				if d, _ := alive.Allow(ctx, "export"); !d.Allowed || d.Remaining != int64(k-1-i) {
					t.Fatalf("at the TTL: Allow #%d = %+v, want admitted, %d remaining", i+1, d, k-1-i)
				}
			}
			if d, _ := alive.Allow(ctx, "export"); d.Allowed {
				t.Fatalf("after taking the dead instance's %d units: Allow = %+v, want denied", k, d)
			}
		})
	}
}

// testInFlightRenewalTicker: without any hook, the limiter's renewal
// goroutine keeps a lease held past several TTLs in real time; releasing
// it frees the unit at once, and the goroutine ends.
func testInFlightRenewalTicker(t *testing.T, drv Driver) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { testkit.VerifyNoLeaks(t, ignore) })
	srv := redistest.Start(t)
	const ttl = time.Second
	p := core.Policy{Name: "ticker", InFlight: 1, LeaseTTL: ttl}
	a := testkit.Limiter(t, drv.New(t, srv), p, core.WithTimeout(5*time.Second))
	b := testkit.Limiter(t, drv.New(t, srv), p, core.WithTimeout(5*time.Second))
	ctx := context.Background()
	d, err := a.Allow(ctx, "download")
	if err != nil || !d.Allowed {
		t.Fatalf("Allow = %+v, %v", d, err)
	}
	deadline := time.Now().Add(ttl * 5 / 2)
	for time.Now().Before(deadline) {
		if got, _ := b.Allow(ctx, "download"); got.Allowed {
			t.Fatalf("while the download runs (renewed every %v): Allow = %+v, want denied", ttl/3, got)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := d.Refund(ctx); err != nil {
		t.Fatal(err)
	}
	got, _ := b.Allow(ctx, "download")
	if !got.Allowed {
		t.Fatalf("after the release: Allow = %+v, want admitted", got)
	}
	if err := got.Refund(ctx); err != nil {
		t.Fatal(err)
	}
	if n := srv.Do(t, "EXISTS", "ratekit:ticker:{download}:lease"); n != int64(0) {
		t.Errorf("EXISTS of the lease key after every release = %v, want 0", n)
	}
}

// testInFlightRefundOnce: a lease is released once, however often its
// decision (or a copy of it) is refunded; releasing one lease never
// frees another.
func testInFlightRefundOnce(t *testing.T, drv Driver) {
	t.Parallel()
	testkit.InFlightRefundOnce(t, fleetBackend(drv))
}

// testInFlightCost: a request of cost n holds n units, all released at
// once; a cost above the limit is invalid.
func testInFlightCost(t *testing.T, drv Driver) {
	t.Parallel()
	testkit.InFlightCost(t, fleetBackend(drv))
}

// testInFlightRedisLayout: the leases of a key are one sorted set in the
// key's Cluster slot, holding at most InFlight members however many
// requests come, with a TTL of at most LeaseTTL, gone once every lease
// is released; Reset forgets it.
func testInFlightRedisLayout(t *testing.T, drv Driver) {
	t.Parallel()
	srv := redistest.Start(t)
	const ttl = 5 * time.Second
	l := testkit.Limiter(t, drv.New(t, srv), core.Policy{Name: "layout", InFlight: 3, LeaseTTL: ttl}, core.WithTimeout(5*time.Second))
	ctx := context.Background()
	const key = "ratekit:layout:{acct}:lease"
	var held []core.Decision
	for range 20 {
		d, _ := l.Allow(ctx, "acct")
		if d.Allowed {
			held = append(held, d)
		}
	}
	if typ := srv.Do(t, "TYPE", key); typ != "zset" {
		t.Fatalf("TYPE %s = %v, want zset", key, typ)
	}
	if n := srv.Do(t, "ZCARD", key); n != int64(3) || len(held) != 3 {
		t.Errorf("after 20 requests: ZCARD = %v, %d admitted; want 3, 3", n, len(held))
	}
	if pttl := srv.Do(t, "PTTL", key).(int64); pttl <= 0 || pttl > ttl.Milliseconds()+1 {
		t.Errorf("PTTL = %d ms, want within (0, %d]", pttl, ttl.Milliseconds()+1)
	}
	if redistest.Slot(key) != redistest.Slot("ratekit:layout:{acct}") {
		t.Errorf("lease key %s is not in the slot of its key", key)
	}
	if err := held[0].Refund(ctx); err != nil {
		t.Fatal(err)
	}
	if n := srv.Do(t, "ZCARD", key); n != int64(2) {
		t.Errorf("after one release: ZCARD = %v, want 2", n)
	}
	if err := l.Reset(ctx, "acct"); err != nil {
		t.Fatal(err)
	}
	if n := srv.Do(t, "EXISTS", key); n != int64(0) {
		t.Errorf("after Reset: EXISTS = %v, want 0", n)
	}
	for i := range held[1:] {
		_ = held[1+i].Refund(ctx)
	}
}

// testInFlightReleaseRetried: a release that fails (the connection to
// Redis drops) is retried by the renewal goroutine, so the unit comes
// back well before the lease's TTL.
func testInFlightReleaseRetried(t *testing.T, drv Driver) {
	t.Parallel()
	srv := redistest.Start(t)
	_, proxy := failRefund(t, drv, srv, core.Policy{Name: "retry", InFlight: 1, LeaseTTL: 3 * time.Second})
	b := testkit.InFlight(t, drv.New(t, srv), "retry", 1)
	ctx := context.Background()
	if got, _ := b.Allow(ctx, "k"); got.Allowed {
		t.Fatalf("after the failed release: Allow = %+v, want denied (the lease is still in Redis)", got)
	}
	proxy.SetDropping(false)
	start := time.Now()
	for {
		got, _ := b.Allow(ctx, "k")
		if got.Allowed {
			break
		}
		if time.Since(start) > 2*time.Second {
			t.Fatalf("2s after the connection came back: Allow = %+v, want admitted (release retried every LeaseTTL/3 = 1s)", got)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("unit back %v after the connection came back", time.Since(start).Round(time.Millisecond))
}

// testInFlightStoreDown: while Redis is down, leases follow the failure
// policy: FailLocal limits each instance to K in flight by itself,
// FailOpen admits, FailClosed denies; the local leases are released as
// usual.
func testInFlightStoreDown(t *testing.T, drv Driver) {
	t.Parallel()
	for _, tc := range []struct {
		policy core.FailurePolicy
		want   []bool // Allow, Allow, Allow after the refunds: admitted?
		src    core.Source
	}{
		{core.FailLocal, []bool{true, true, false}, core.SourceLocal},
		{core.FailOpen, []bool{true, true, true}, core.SourceOpen},
		{core.FailClosed, []bool{false, false, false}, core.SourceClosed},
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			l := testkit.Limiter(t, drv.New(t, srv), core.Policy{Name: "down", InFlight: 2},
				core.WithFailurePolicy(tc.policy), core.WithTimeout(100*time.Millisecond))
			srv.Stop()
			ctx := context.Background()
			var got []bool
			var ds []core.Decision
			for range 3 {
				d, err := l.Allow(ctx, "k")
				if err != nil || d.Source != tc.src {
					t.Fatalf("Allow with Redis down = %+v, %v; want Source %v", d, err, tc.src)
				}
				got = append(got, d.Allowed)
				ds = append(ds, d)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("admitted %v, want %v", got, tc.want)
			}
			for i := range ds {
				if err := ds[i].Refund(ctx); err != nil {
					t.Errorf("Refund of a fallback admission: %v", err)
				}
			}
			if d, _ := l.Allow(ctx, "k"); d.Allowed != tc.want[0] {
				t.Errorf("after the refunds: Allow = %+v, want Allowed %v", d, tc.want[0])
			}
		})
	}
}

// testInFlightBreakerAndTimeout: with Redis paused, an acquire returns
// within the limiter's timeout, decided by the failure policy; after
// five failures the breaker answers without calling Redis; and the takes
// that reached Redis after their caller gave up (their answers lost) are
// released in the background, well before their TTL.
func testInFlightBreakerAndTimeout(t *testing.T, drv Driver) {
	t.Parallel()
	srv := redistest.Start(t)
	const (
		timeout = 50 * time.Millisecond
		ttl     = 6 * time.Second // a renewal round every 2 s
	)
	obs := &testkit.EventCounts{}
	l := testkit.Limiter(t, drv.New(t, srv), core.Policy{Name: "paused", InFlight: 2, LeaseTTL: ttl},
		core.WithTimeout(timeout), core.WithObserver(obs), core.WithLocalShare(false))
	ctx := context.Background()
	if d, err := l.Allow(ctx, "warm"); err != nil || d.Source != core.SourceStore {
		t.Fatalf("Allow(warm) = %+v, %v", d, err)
	} else {
		_ = d.Refund(ctx)
	}
	srv.Pause(time.Second)
	paused := time.Now()
	var ds []core.Decision
	for i := range 8 {
		start := time.Now()
		d, err := l.Allow(ctx, "k")
		if lat := time.Since(start); lat > timeout+latencyMargin {
			t.Errorf("Allow #%d with Redis paused took %v, want within %v", i+1, lat, timeout+latencyMargin)
		}
		if err != nil || d.Source != core.SourceLocal || d.Allowed != (i < 2) {
			t.Errorf("Allow #%d with Redis paused = %+v, %v; want decided locally, admitted for the first 2", i+1, d, err)
		}
		ds = append(ds, d)
	}
	if got := obs.Count(core.EventStoreError); got != 5 {
		t.Errorf("store errors = %d, want 5 (then the breaker answers)", got)
	}
	if got := obs.Count(core.EventBreakerOpen); got != 1 {
		t.Errorf("breaker opened %d times, want 1", got)
	}
	for i := range ds {
		_ = ds[i].Refund(ctx) // local leases
	}
	// The 5 takes sent while paused run when the pause ends; 2 of them
	// fit. The limiter releases all 5 at its next renewal round, long
	// before their TTL.
	for srv.Do(t, "EXISTS", "ratekit:paused:{k}:lease") != int64(0) {
		if time.Since(paused) > ttl-time.Second {
			t.Fatalf("%v after the pause: the lost takes' leases are still held, want them released", time.Since(paused))
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Every announcement of the instance is a ZADD in a transaction of
	// its own (MULTI): the takes' are the others.
	stats := srv.Do(t, "INFO", "commandstats").(string)
	takes := statCalls(stats, "zadd") - statCalls(stats, "multi")
	switch {
	case !drv.DropsAbandoned:
		if takes != 3 {
			t.Errorf("commandstats %q: %d ZADD of takes, want 3 (warm-up, and 2 lost takes that fitted)", stats, takes)
		}
	case takes < 1 || takes > 3:
		t.Errorf("commandstats %q: %d ZADD of takes, want 1 to 3 (warm-up, and of the 2 lost takes that fitted those the client did not drop)", stats, takes)
	}
}

// statCalls returns the calls of cmd (lower case) that INFO commandstats
// reports in stats, 0 when it reports none.
func statCalls(stats, cmd string) int {
	_, rest, ok := strings.Cut(stats, "cmdstat_"+cmd+":calls=")
	if !ok {
		return 0
	}
	n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
	return n
}

// testLeasesAcrossInstances (rueidisstore's TestLeasesAcrossInstances,
// now on both drivers): an InFlight limit holds across two instances on
// their own clients: what one holds the other cannot take, a release
// on one frees a unit for the other, and under concurrency no more than
// the limit is ever in flight.
func testLeasesAcrossInstances(t *testing.T, drv Driver) {
	const k = 3
	srv := redistest.Start(t)
	p := core.Policy{Name: "exports", InFlight: k}
	a := testkit.Limiter(t, drv.New(t, srv), p, core.WithTimeout(5*time.Second))
	b := testkit.Limiter(t, drv.New(t, srv), p, core.WithTimeout(5*time.Second))
	ctx := context.Background()
	var held []core.Decision
	for i := range k {
		d, err := a.Allow(ctx, "tenant")
		if err != nil || !d.Allowed || d.Remaining != int64(k-1-i) || d.Source != core.SourceStore {
			t.Fatalf("A Allow #%d = %+v, %v; want admitted, %d remaining", i+1, d, err, k-1-i)
		}
		held = append(held, d)
	}
	if d, err := b.Allow(ctx, "tenant"); err != nil || d.Allowed || d.RetryAfter != time.Second {
		t.Fatalf("B Allow with A holding %d = %+v, %v; want denied with the 1s hint", k, d, err)
	}
	if err := held[0].Refund(ctx); err != nil {
		t.Fatal(err)
	}
	d, err := b.Allow(ctx, "tenant")
	if err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("B Allow after A released one = %+v, %v; want admitted, 0 remaining", d, err)
	}
	held = append(held[1:], d)
	if d, err := a.Peek(ctx, "tenant"); err != nil || d.Remaining != 0 {
		t.Errorf("A Peek = %+v, %v; want 0 remaining", d, err)
	}
	for i := range held {
		if err := held[i].Refund(ctx); err != nil {
			t.Fatal(err)
		}
	}

	var cur, peak, admitted atomic.Int64
	var wg sync.WaitGroup
	for i := range 16 {
		l := []*core.Limiter{a, b}[i%2]
		wg.Go(func() {
			for range 20 {
				d, err := l.Allow(ctx, "busy")
				if err != nil || d.Source != core.SourceStore {
					t.Errorf("Allow(busy) = %+v, %v; want the store's decision", d, err)
					return
				}
				if !d.Allowed {
					continue
				}
				admitted.Add(1)
				n := cur.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				time.Sleep(time.Millisecond)
				cur.Add(-1)
				if err := d.Refund(ctx); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if got := peak.Load(); got != k {
		t.Errorf("2 instances x 8 goroutines: at most %d requests in flight, want exactly %d", got, k)
	}
	for _, l := range []*core.Limiter{a, b} {
		if d, err := l.Peek(ctx, "busy"); err != nil || d.Remaining != k {
			t.Errorf("Peek(busy) after every release = %+v, %v; want %d remaining", d, err, k)
		}
	}
	t.Logf("%d of 320 requests admitted, at most %d in flight", admitted.Load(), peak.Load())
}
