package redissuite

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/core/driver/drivertest"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// testStore runs the driver conformance suite on one Redis, with the
// server's clock, with the limiter's, and with one decision per script
// call. (Merged from core's TestRedisStore and rueidisstore's TestStore.)
func testStore(t *testing.T, drv Driver) {
	srv := redistest.Start(t)
	t.Run("ServerTime", func(t *testing.T) {
		drivertest.Run(t, func(t *testing.T) core.Store { return drv.New(t, srv) })
	})
	t.Run("ClientTime", func(t *testing.T) {
		drivertest.Run(t, func(t *testing.T) core.Store {
			return drv.Open(t, on(srv, Conf{Prefix: "ct"}))
		}, core.WithClock(time.Now))
	})
	t.Run("Unbatched", func(t *testing.T) {
		drivertest.Run(t, func(t *testing.T) core.Store {
			return drv.Open(t, on(srv, Conf{Prefix: "one", Batching: 1}))
		})
	})
}

// testRedisExactness: 4 app instances (4 limiters on 4 clients) with 64
// goroutines each on one key admit exactly the limit between them, and
// Redis holds exactly the limit's entries.
func testRedisExactness(t *testing.T, drv Driver) {
	const (
		limit      = 1000
		window     = 30 * time.Second
		instances  = 4
		goroutines = 64
		each       = 8
	)
	srv := redistest.Start(t)
	p := core.Policy{Name: "exact", Rules: []core.Rule{{Limit: limit, Window: window}}}
	allowed := hammerRedis(t, drv, srv, p, instances, goroutines, each, "k", nil)
	if allowed != limit {
		t.Errorf("%d instances x %d goroutines x %d Allow(k) with Limit %d: %d allowed, want exactly %d",
			instances, goroutines, each, limit, allowed, limit)
	}
	store := drv.New(t, srv)
	key := store.Key(p.Name, "k")
	if got := zcard(t, srv.Client(t), key); got != limit {
		t.Errorf("ZCARD %s = %d, want %d", key, got, limit)
	}
	// The log is a header (the TTL's end, the number of hints h, h hints)
	// then 8 bytes per entry.
	if n, _ := srv.Do(t, "STRLEN", key).(int64); n < 8*limit || n > 8*(limit+2+64) {
		t.Errorf("STRLEN %s = %d, want %d entries of 8 bytes and a short header", key, n, limit)
	}
	l := testkit.Limiter(t, store, p, core.WithTimeout(2*time.Second))
	if d, err := l.Peek(context.Background(), "k"); err != nil || d.Rules()[0].Used != limit {
		t.Errorf("Peek(k) = %+v, %v; want Used %d", d, err, limit)
	}
}

// testRedisClassic: 1005 requests at one instant with Limit 1000 admit
// 1000 and deny 5, each denial saying when the oldest entry leaves the
// window.
func testRedisClassic(t *testing.T, drv Driver) {
	const (
		limit  = 1000
		extra  = 5
		window = 30 * time.Second
	)
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	store := drv.New(t, srv)

	t.Run("limiter", func(t *testing.T) {
		p := core.Policy{Name: "classic", Rules: []core.Rule{{Limit: limit, Window: window}}}
		l := testkit.Limiter(t, store, p, core.WithTimeout(2*time.Second), core.WithDenyCache(0))
		type call struct {
			before, after time.Time
			d             core.Decision
		}
		calls := make([]call, limit+extra)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range calls {
			wg.Go(func() {
				<-start
				c := &calls[i]
				c.before = time.Now()
				d, err := l.Allow(context.Background(), "k")
				c.after = time.Now()
				if err != nil {
					t.Errorf("Allow(k): %v", err)
				}
				c.d = d
			})
		}
		close(start)
		wg.Wait()
		key := store.Key(p.Name, "k")
		sc := scores(t, rdb, key)
		if len(sc) != limit {
			t.Fatalf("ZCARD %s = %d, want %d", key, len(sc), limit)
		}
		oldest := sc[0]
		// Then a few denials one at a time, whose time is known closely.
		for range 5 {
			var c call
			c.before = time.Now()
			c.d, _ = l.Allow(context.Background(), "k")
			c.after = time.Now()
			calls = append(calls, c)
		}
		var allowed, denied int
		var widest time.Duration
		for i, c := range calls {
			if c.d.Source != core.SourceStore {
				t.Errorf("call %d: Allow(k) = %+v, want a decision of the store", i, c.d)
			}
			if c.d.Allowed {
				allowed++
				continue
			}
			denied++
			// The server decided at oldest + window - RetryAfter; that
			// instant must lie within the call, give or take 1 ms.
			at := oldest + window.Microseconds() - c.d.RetryAfter.Microseconds()
			lo, hi := c.before.UnixMicro()-1000, c.after.UnixMicro()+1000
			if at < lo || at > hi {
				t.Errorf("call %d: RetryAfter %v puts the decision at %d µs, outside the call [%d, %d] ± 1 ms (oldest entry %d)",
					i, c.d.RetryAfter, at, c.before.UnixMicro(), c.after.UnixMicro(), oldest)
			}
			if i >= limit+extra {
				widest = max(widest, c.after.Sub(c.before))
			}
		}
		if allowed != limit || denied != extra+5 {
			t.Errorf("%d concurrent Allow(k) with Limit %d, then 5 more: %d allowed, %d denied; want %d, %d",
				limit+extra, limit, allowed, denied, limit, extra+5)
		}
		distinct := len(slices.Compact(slices.Clone(sc)))
		t.Logf("%d entries at %d distinct microseconds; serial denials known within %v", len(sc), distinct, widest)
	})

	t.Run("store", func(t *testing.T) {
		q := driver.Query{Policy: "classic-store", Key: "k", Rules: []driver.Rule{{Limit: limit, Window: window}}, N: 1}
		results := make([]driver.Result, limit+extra)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range results {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				<-start
				r, err := store.Take(ctx, q)
				if err != nil {
					t.Errorf("Take #%d: %v", i, err)
				}
				results[i] = r
			})
		}
		close(start)
		wg.Wait()
		sc := scores(t, rdb, store.Key(q.Policy, q.Key))
		if len(sc) != limit {
			t.Fatalf("ZCARD = %d, want %d", len(sc), limit)
		}
		oldest := sc[0]
		denied := 0
		for _, r := range results {
			if r.Allowed {
				continue
			}
			denied++
			want := time.Duration(oldest+window.Microseconds()-r.At) * time.Microsecond
			if got := r.Rules.All()[0].RetryAfter; got != want {
				t.Errorf("denied Take at %d µs: RetryAfter %v, want exactly %v (oldest score %d + window - at)", r.At, got, want, oldest)
			}
		}
		if denied != extra {
			t.Errorf("%d concurrent Take with Limit %d: %d denied, want %d", limit+extra, limit, denied, extra)
		}
	})
}

// testRedisSameInstant: units decided at the same microsecond are all
// recorded, never overwriting each other.
func testRedisSameInstant(t *testing.T, drv Driver) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)

	t.Run("AllowN", func(t *testing.T) {
		store := drv.New(t, srv)
		// A store's first call loads its library: no timeout of a busy
		// machine's measure decides this case.
		l := testkit.Limiter(t, store, core.Policy{Name: "n", Rules: []core.Rule{{Limit: 10, Window: time.Minute}}},
			core.WithTimeout(2*time.Second))
		d, err := l.AllowN(context.Background(), "k", 5)
		if err != nil || !d.Allowed || d.Remaining != 5 {
			t.Fatalf("AllowN(k, 5) = %+v, %v; want allowed, Remaining 5", d, err)
		}
		sc := scores(t, rdb, store.Key("n", "k"))
		if len(sc) != 5 {
			t.Fatalf("ZCARD after AllowN(k, 5) = %d, want 5", len(sc))
		}
		for _, s := range sc[1:] {
			if s != sc[0] {
				t.Errorf("scores of one AllowN = %v, want one instant", sc)
				break
			}
		}
	})

	for _, tc := range []struct {
		name string
		opts []core.Option
	}{
		{"server time", nil},
		{"client time", []core.Option{core.WithClock(time.Now)}},
	} {
		t.Run("concurrent "+tc.name, func(t *testing.T) {
			const n = 300
			store := drv.Open(t, on(srv, Conf{Prefix: strings.ReplaceAll(tc.name, " ", "")}))
			l := testkit.Limiter(t, store, core.Policy{Name: "c", Rules: []core.Rule{{Limit: 1000, Window: time.Minute}}},
				append([]core.Option{core.WithTimeout(2 * time.Second)}, tc.opts...)...)
			var allowed atomic.Int64
			var wg sync.WaitGroup
			start := make(chan struct{})
			for range n {
				wg.Go(func() {
					<-start
					d, err := l.Allow(context.Background(), "k")
					if err != nil || d.Source != core.SourceStore {
						t.Errorf("Allow(k) = %+v, %v; want a decision of the store", d, err)
					}
					if d.Allowed {
						allowed.Add(1)
					}
				})
			}
			close(start)
			wg.Wait()
			sc := scores(t, rdb, store.Key("c", "k"))
			if int64(len(sc)) != allowed.Load() || len(sc) != n {
				t.Errorf("ZCARD = %d after %d admitted of %d, want %d", len(sc), allowed.Load(), n, n)
			}
			if now := time.Now().UnixMicro(); sc[0] < now-60e6 || sc[len(sc)-1] > now {
				t.Errorf("scores %d..%d µs, want within the last minute of %d", sc[0], sc[len(sc)-1], now)
			}
			t.Logf("%d entries at %d distinct microseconds", len(sc), len(slices.Compact(slices.Clone(sc))))
		})
	}
}

// testRedisMultiRule: 1/200ms + 3/1s holds atomically under a flood: the
// recorded log never breaks either rule, and denials record nothing.
func testRedisMultiRule(t *testing.T, drv Driver) {
	const (
		short = 200 * time.Millisecond
		long  = time.Second
		flood = 600 * time.Millisecond
	)
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	store := drv.New(t, srv)
	p := core.Policy{Name: "multi", Rules: []core.Rule{{Limit: 1, Window: short}, {Limit: 3, Window: long}}}
	l := testkit.Limiter(t, store, p, core.WithTimeout(2*time.Second))
	var allowed, burstAllowed atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	var begin time.Time
	for g := range 64 {
		wg.Go(func() {
			<-start
			for i := 0; ; i++ {
				d, err := l.Allow(context.Background(), "k")
				if err != nil || d.Source.Fallback() {
					t.Errorf("Allow(k) = %+v, %v; want a decision of the store", d, err)
					return
				}
				if d.Allowed {
					allowed.Add(1)
					if i == 0 {
						burstAllowed.Add(1)
					}
				}
				// 8 goroutines keep flooding after the burst.
				if g >= 8 || time.Since(begin) > flood {
					return
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	begin = time.Now()
	close(start)
	wg.Wait()
	if got := burstAllowed.Load(); got != 1 {
		t.Errorf("64 concurrent Allow(k) under 1/%v + 3/%v: %d allowed, want 1", short, long, got)
	}
	sc := scores(t, rdb, store.Key(p.Name, "k"))
	if int64(len(sc)) != allowed.Load() {
		t.Errorf("ZCARD = %d, admitted %d: want equal (denials record nothing)", len(sc), allowed.Load())
	}
	if n := len(sc); n < 2 || n > 3 {
		t.Errorf("%v of flood under 1/%v + 3/%v admitted %d, want 2 or 3", flood, short, long, n)
	}
	for i := 1; i < len(sc); i++ {
		if gap := time.Duration(sc[i]-sc[i-1]) * time.Microsecond; gap < short {
			t.Errorf("entries %d and %d are %v apart, want at least %v", i-1, i, gap, short)
		}
	}
	for i := 3; i < len(sc); i++ {
		if span := time.Duration(sc[i]-sc[i-3]) * time.Microsecond; span < long {
			t.Errorf("4 entries within %v, want at most 3 per %v", span, long)
		}
	}
	t.Logf("admitted at %v", sc)
}

// testRedisKeysExpire: a key carries a TTL slightly past twice the longest window
// and is gone once the window has passed.
func testRedisKeysExpire(t *testing.T, drv Driver) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	store := drv.New(t, srv)
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		rules   []core.Rule
		longest time.Duration
	}{
		{"one rule", []core.Rule{{Limit: 5, Window: 100 * time.Millisecond}}, 100 * time.Millisecond},
		{"two rules", []core.Rule{{Limit: 1, Window: 50 * time.Millisecond}, {Limit: 5, Window: 150 * time.Millisecond}}, 150 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := strings.ReplaceAll(tc.name, " ", "-")
			l := testkit.Limiter(t, store, core.Policy{Name: name, Rules: tc.rules})
			key := store.Key(name, "k")
			if _, err := l.Peek(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			if n := rdb.Exists(ctx, key).Val(); n != 0 {
				t.Errorf("EXISTS %s after a Peek = %d, want 0 (Peek writes nothing)", key, n)
			}
			if d, _ := l.Allow(ctx, "k"); !d.Allowed {
				t.Fatalf("Allow(k) = %+v, want allowed", d)
			}
			// The TTL is set to twice the longest window, so that it need
			// not be refreshed on every write.
			pttl := rdb.PTTL(ctx, key).Val()
			if pttl <= 2*tc.longest-20*time.Millisecond || pttl > 2*tc.longest+2*time.Millisecond {
				t.Errorf("PTTL %s = %v, want just past twice the longest window %v", key, pttl, tc.longest)
			}
			time.Sleep(pttl + 20*time.Millisecond)
			if n := rdb.Exists(ctx, key).Val(); n != 0 {
				t.Errorf("EXISTS %s after its window passed = %d, want 0", key, n)
			}
		})
	}
}

// testRedisRetryCountedOnce: the reply to a decision is lost after Redis
// ran it. The client does not send the script call again (a retry would
// count the units twice; go-redis and rueidis retry only what is safe to
// run twice): the decision falls back to the failure policy, and Redis
// holds the units once until the fallback's admission is recorded there
// too, before the key's next decision. (Merged with rueidisstore's
// TestLostReplyCountedOnce.)
func testRedisRetryCountedOnce(t *testing.T, drv Driver) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	// One connection and nothing sent on it by the client itself, fast
	// retries if the client made any: the next request the proxy sees is
	// the decision's.
	store := drv.Open(t, Conf{Addrs: []string{proxy.Addr()}, Quiet: true})
	const limit = 10
	p := core.Policy{Name: "retry", Rules: []core.Rule{{Limit: limit, Window: time.Minute}}}
	// Long enough for the client to reconnect and retry, if it did; no
	// subscription (no deny cache) shares the connection, and the proxy
	// drops the reply to the decision's script call, not to an
	// announcement of the fleet's.
	l := testkit.Limiter(t, store, p, core.WithTimeout(3*time.Second), core.WithDenyCache(0), core.WithLocalShare(false))
	ctx := context.Background()
	// Load the script and open a connection, so that the next request the
	// proxy sees is the FCALL of the decision.
	if d, err := l.Allow(ctx, "warm"); err != nil || d.Source != core.SourceStore {
		t.Fatalf("Allow(warm) = %+v, %v", d, err)
	}

	for _, n := range []int64{1, 3} {
		t.Run(fmt.Sprintf("AllowN %d", n), func(t *testing.T) {
			key := fmt.Sprintf("k%d", n)
			calls, dropped := commandCalls(t, admin, "fcall"), proxy.Dropped()
			proxy.DropNextReplyTo("fcall") // the decision's, not an announcement's
			d, err := l.AllowN(ctx, key, n)
			if err != nil {
				t.Fatal(err)
			}
			// Evidence that the test is not vacuous: the reply was dropped
			// after the server ran the script.
			if got := proxy.Dropped() - dropped; got != 1 {
				t.Fatalf("replies dropped = %d, want 1", got)
			}
			if got := commandCalls(t, admin, "fcall") - calls; got != 1 {
				t.Fatalf("FCALL ran %d times, want 1 (no retry)", got)
			}
			if !d.Allowed || d.Source != core.SourceLocal {
				t.Errorf("AllowN(%s, %d) with a lost reply = %+v, want allowed by the local fallback", key, n, d)
			}
			if got := zcard(t, admin, store.Key(p.Name, key)); got != n {
				t.Errorf("entries after a lost reply to AllowN(%s, %d) = %d, want %d (counted once)", key, n, got, n)
			}
			// The store answers the next decisions again, and holds the
			// units once.
			if d, err := l.Peek(ctx, key); err != nil || d.Source != core.SourceStore || d.Rules()[0].Used != n {
				t.Errorf("Peek(%s) after = %+v, %v; want the store's answer, Used %d (counted once)", key, d, err, n)
			}
			// The fallback's admission, recorded before the next decision
			// (the outcome of a call without a reply is unknown, and
			// counting it twice can only under-admit): counted at most
			// twice, never by a blind retry.
			if d, err := l.Allow(ctx, key); err != nil || d.Source != core.SourceStore || d.Remaining != limit-2*n-1 {
				t.Errorf("Allow(%s) after = %+v, %v; want the store's decision, Remaining %d (the fallback's admission recorded)", key, d, err, limit-2*n-1)
			}
		})
	}
}

// testRedisLibraryReload: a server that lost ratekit's library (FUNCTION
// FLUSH; SCRIPT FLUSH where FCALL is missing, as before Redis 7) gets it
// again from the next call, transparently, and decisions stay exact.
func testRedisLibraryReload(t *testing.T, drv Driver) {
	for _, tc := range []struct {
		name  string
		args  []string // for redis-server
		flush func(ctx context.Context, rdb *redis.Client) error
		load  string // the command that reloads, in INFO commandstats
		calls string // the command of a decision
	}{
		{"functions", nil, func(ctx context.Context, rdb *redis.Client) error { return rdb.FunctionFlush(ctx).Err() },
			"function|load", "fcall"},
		{"scripts (no FCALL)", []string{"--rename-command", "FCALL", ""},
			func(ctx context.Context, rdb *redis.Client) error { return rdb.ScriptFlush(ctx).Err() },
			"eval", "evalsha"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t, redistest.WithArgs(tc.args...))
			rdb := srv.Client(t)
			store := drv.New(t, srv)
			p := core.Policy{Name: "flush", Rules: []core.Rule{{Limit: 10, Window: time.Minute}}}
			// A reload is two round trips: give them time on a busy machine.
			l := testkit.Limiter(t, store, p, core.WithTimeout(2*time.Second))
			ctx := context.Background()
			d1, err := l.Allow(ctx, "k")
			if err != nil || d1.Source != core.SourceStore {
				t.Fatalf("Allow(k) = %+v, %v", d1, err)
			}
			if got := commandCalls(t, rdb, tc.calls); got == 0 {
				t.Fatalf("no %s ran: the decision did not take the %s path", tc.calls, tc.name)
			}
			for _, step := range []struct {
				name string
				do   func() error
			}{
				{"Allow", func() error {
					d, err := l.Allow(ctx, "k")
					if err == nil && (d.Source != core.SourceStore || !d.Allowed || d.Remaining != 8) {
						return fmt.Errorf("Allow(k) = %+v, want allowed by the store, Remaining 8", d)
					}
					return err
				}},
				{"Refund", func() error { return d1.Refund(ctx) }},
			} {
				t.Run(step.name, func(t *testing.T) {
					if err := tc.flush(ctx, rdb); err != nil {
						t.Fatal(err)
					}
					loads := commandCalls(t, rdb, tc.load)
					if err := step.do(); err != nil {
						t.Fatalf("%s after the flush: %v", step.name, err)
					}
					if got := commandCalls(t, rdb, tc.load) - loads; got != 1 {
						t.Errorf("%s ran %d times after the flush, want 1 (reload)", tc.load, got)
					}
				})
			}
			if got := zcard(t, rdb, store.Key(p.Name, "k")); got != 1 {
				t.Errorf("entries = %d, want 1 (2 taken, 1 refunded)", got)
			}
		})
	}
}

// testRedisDenyCache: a denied key flooding is answered from the deny
// cache, with few Redis calls, and never denied past the moment the store
// would admit it.
func testRedisDenyCache(t *testing.T, drv Driver) {
	const (
		limit  = 2
		window = 300 * time.Millisecond
		flood  = 3 * window
		// slack covers rounding to microseconds.
		slack = time.Millisecond
		// driftPPM is the error allowed in measuring the clocks' rates.
		driftPPM = 500
	)
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	rec := &recStore{Store: drv.New(t, srv)}
	l := testkit.Limiter(t, rec, core.Policy{Name: "deny", Rules: []core.Rule{{Limit: limit, Window: window}}}, core.WithTimeout(2*time.Second))
	ctx := context.Background()
	type call struct {
		before, after time.Time
		d             core.Decision
	}
	var (
		mu    sync.Mutex
		calls []call
		wg    sync.WaitGroup
	)
	// Load the script first, so that every store call below is one run.
	if d, err := l.Allow(ctx, "warm"); err != nil || d.Source != core.SourceStore {
		t.Fatalf("Allow(warm) = %+v, %v", d, err)
	}
	warm := len(rec.results())
	evalsha := commandCalls(t, rdb, "fcall")
	server0, local0 := serverTime(t, rdb)
	begin := time.Now()
	for range 4 {
		wg.Go(func() {
			for time.Since(begin) < flood {
				var c call
				c.before = time.Now()
				d, err := l.Allow(ctx, "k")
				c.after = time.Now()
				if err != nil || d.Source.Fallback() {
					t.Errorf("Allow(k) = %+v, %v", d, err)
					return
				}
				c.d = d
				mu.Lock()
				calls = append(calls, c)
				mu.Unlock()
				time.Sleep(200 * time.Microsecond)
			}
		})
	}
	wg.Wait()
	server1, local1 := serverTime(t, rdb)
	// The deny cache times a RetryAfter measured on the server's clock with
	// this process's monotonic clock; any difference in their rates moves
	// the end of a cached denial by that much per second of RetryAfter.
	drift := float64(server1.Sub(server0)-local1.Sub(local0)) / float64(local1.Sub(local0))
	redisCalls := commandCalls(t, rdb, "fcall") - evalsha
	takes := rec.results()[warm:]
	var cached int
	for _, c := range calls {
		if c.d.Source == core.SourceCache {
			cached++
		}
	}
	periods := int64(flood/window) + 1
	t.Logf("%d decisions in %v: %d from the deny cache, %d store calls, %d script runs on Redis",
		len(calls), flood, cached, len(takes), redisCalls)
	// Concurrent store calls may share one script run (batching).
	if redisCalls < 1 || redisCalls > int64(len(takes)) {
		t.Errorf("Redis ran the script %d times for %d store calls, want between 1 and %d", redisCalls, len(takes), len(takes))
	}
	if int64(len(takes)) > 12*periods {
		t.Errorf("%d store calls over %d periods of %v, want at most a handful per period", len(takes), periods, window)
	}
	if cached < 10*len(takes) {
		t.Errorf("%d answers from the deny cache for %d store calls, want the cache to answer the flood", cached, len(takes))
	}

	// No cached denial may outlast the store's: at the moment the cache
	// answered, the key frees when the oldest of the last 2 admissions
	// (server times, recorded by the store) leaves the window.
	var admitted []int64
	for _, r := range takes {
		if r.Allowed {
			admitted = append(admitted, r.At)
		}
	}
	slices.Sort(admitted)
	// stretch converts a duration of this process's monotonic clock to the
	// wall clock the server reads (both on this machine).
	stretch := func(d time.Duration) time.Duration { return time.Duration(float64(d) * (1 + drift)) }
	var worst time.Duration
	bad := 0
	for i, c := range calls {
		if c.d.Source != core.SourceCache {
			continue
		}
		now := c.before.UnixMicro()
		j, _ := slices.BinarySearch(admitted, now)
		if j < limit {
			t.Errorf("call %d: cached denial with only %d admissions before it", i, j)
			continue
		}
		free := time.UnixMicro(admitted[j-limit]).Add(window)
		claimed := c.before.Round(0).Add(stretch(c.d.RetryAfter))
		late := claimed.Sub(free)
		worst = max(worst, late)
		// What the clocks' rates explain over the store's RetryAfter (at
		// most a window), plus measurement noise, is not the cache's
		// fault; anything more is.
		if allowed := slack + time.Duration((math.Abs(drift)+driftPPM/1e6)*float64(window)); late > allowed {
			if bad++; bad <= 5 {
				t.Errorf("call %d: cached denial holds until %v, but the store frees the key at %v: %v late, more than %v",
					i, claimed.Format(time.StampMicro), free.Format(time.StampMicro), late, allowed)
			}
		}
	}
	t.Logf("server clock vs this process's monotonic clock: %+.0f ppm; cached denials end at worst %v after the store frees the key", drift*1e6, worst)

	// After the last denial's RetryAfter, the key is admitted by the store.
	var last call
	for _, c := range calls {
		if !c.d.Allowed && c.after.Add(c.d.RetryAfter).After(last.after.Add(last.d.RetryAfter)) {
			last = c
		}
	}
	wait := time.Duration(float64(last.d.RetryAfter) * (1 + math.Abs(drift) + driftPPM/1e6))
	time.Sleep(time.Until(last.after.Add(wait)) + slack)
	if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed || d.Source != core.SourceStore {
		t.Errorf("Allow(k) once the last denial's RetryAfter passed = %+v, %v; want allowed by the store", d, err)
	}
}

// testRedisLargeLog drives a key past the size read in one piece (16 KiB,
// 2047 entries), where entries are read one by one and appended to:
// decisions stay exact, refunds work, and dead entries are trimmed.
func testRedisLargeLog(t *testing.T, drv Driver) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	store := drv.New(t, srv)
	const limit = 5000
	window := 2 * time.Second
	l := testkit.Limiter(t, store, core.Policy{Name: "large", Rules: []core.Rule{{Limit: limit, Window: window}, {Limit: 4 * limit, Window: 10 * time.Second}}},
		core.WithTimeout(5*time.Second), core.WithDenyCache(0))
	ctx := context.Background()
	key := store.Key("large", "k")
	admitted := int64(0)
	var first time.Time
	for admitted < limit {
		n := min(int64(97), limit-admitted)
		d, err := l.AllowN(ctx, "k", n)
		if err != nil || !d.Allowed || d.Source != core.SourceStore {
			t.Fatalf("AllowN(%d) with %d admitted = %+v, %v", n, admitted, d, err)
		}
		if admitted == 0 {
			first = time.Now()
		}
		admitted += n
		if d.Remaining != limit-admitted {
			t.Fatalf("Remaining after %d = %d, want %d", admitted, d.Remaining, limit-admitted)
		}
	}
	if got := zcard(t, rdb, key); got != limit {
		t.Fatalf("entries = %d, want %d", got, limit)
	}
	d, err := l.Allow(ctx, "k")
	if err != nil || d.Allowed || d.Source != core.SourceStore {
		t.Fatalf("Allow at the limit = %+v, %v; want denied by the store", d, err)
	}
	if lo, hi := window-time.Since(first)-50*time.Millisecond, window; d.RetryAfter < lo || d.RetryAfter > hi {
		t.Errorf("RetryAfter = %v, want about %v (the first entry leaving the window)", d.RetryAfter, window-time.Since(first))
	}
	// A refund of a large key gives its units back.
	d2, _ := l.Allow(ctx, "other")
	if err := d2.Refund(ctx); err != nil {
		t.Fatal(err)
	}
	// Once the 2 s window has passed, the next admissions trim the dead
	// head: the key does not keep growing.
	time.Sleep(time.Until(first.Add(window + 100*time.Millisecond)))
	for i := range 100 {
		if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed {
			t.Fatalf("Allow #%d after the window = %+v, %v", i, d, err)
		}
	}
	// The 10 s rule still counts every entry: none is dead yet.
	if got := zcard(t, rdb, key); got != limit+100 {
		t.Errorf("entries after the 2 s window passed = %d, want %d (all live for the 10 s rule)", got, limit+100)
	}
	if d, _ := l.Peek(ctx, "k"); d.Rules()[0].Used != 100 || d.Rules()[1].Used != limit+100 {
		t.Errorf("Peek after = %+v, want 100 used in 2s and %d in 10s", d.Rules(), limit+100)
	}
	// A key whose entries all die is trimmed by the next admissions.
	short := testkit.Limiter(t, store, core.Policy{Name: "large-short", Rules: []core.Rule{{Limit: 3000, Window: 300 * time.Millisecond}}},
		core.WithTimeout(5*time.Second), core.WithDenyCache(0))
	for range 30 {
		if d, err := short.AllowN(ctx, "k", 100); err != nil || !d.Allowed {
			t.Fatalf("AllowN(100) = %+v, %v", d, err)
		}
	}
	time.Sleep(350 * time.Millisecond)
	for range 3 {
		if d, err := short.AllowN(ctx, "k", 100); err != nil || !d.Allowed || d.Remaining < 2700 {
			t.Fatalf("AllowN(100) after the window = %+v, %v; want allowed, the dead entries not counted", d, err)
		}
	}
	if got := zcard(t, rdb, store.Key("large-short", "k")); got > 300 {
		t.Errorf("entries after the window passed = %d, want at most 300 (the dead head trimmed)", got)
	}
}

// testRedisLogShrinks: a key whose log was long (past the 512 bytes a
// decision reads whole), which a decision therefore loads by its header
// alone, and whose dead head is then trimmed to under 512 bytes but over
// the header's read, is decided from every entry it holds, not from the
// header's read alone: the exact count, before and after.
func testRedisLogShrinks(t *testing.T, drv Driver) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	store := drv.New(t, srv)
	clock := drivertest.NewClock(time.Unix(1_900_000_000, 0))
	l := testkit.Limiter(t, store, core.Policy{Name: "shrinks", Rules: []core.Rule{{Limit: 100, Window: 10 * time.Second}}},
		core.WithClock(clock.Now), core.WithDenyCache(0), core.WithTimeout(2*time.Second))
	ctx := context.Background()
	key := store.Key("shrinks", "k")
	take := func(n, used int64) {
		t.Helper()
		d, err := l.AllowN(ctx, "k", n)
		if err != nil || !d.Allowed || d.Source != core.SourceStore || d.Remaining != 100-used {
			t.Fatalf("AllowN(%d) = %+v, %v; want allowed by the store with %d remaining", n, d, err, 100-used)
		}
	}
	for i := range int64(40) {
		take(1, i+1)
	}
	clock.Add(5 * time.Second)
	for i := range int64(30) {
		take(1, 41+i)
	}
	if n := rdb.StrLen(ctx, key).Val(); n <= 512 {
		t.Fatalf("the log holds %d bytes after 70 admissions, want a long one (over 512)", n)
	}
	// The first 40 leave the window: the next admission trims them.
	clock.Add(5*time.Second + time.Millisecond)
	take(1, 31)
	if n := rdb.StrLen(ctx, key).Val(); n <= 128 || n >= 512 {
		t.Fatalf("the log holds %d bytes once trimmed, want between 128 and 512", n)
	}
	for i := range int64(5) {
		take(1, 32+i)
	}
	if d, _ := l.Peek(ctx, "k"); d.Rules()[0].Used != 36 {
		t.Errorf("Peek once trimmed = %+v, want 36 used", d.Rules())
	}
}

// testRedisDenyCacheAcrossInstances: a key denied and cached on instance A
// is admitted by A as soon as instance B resets it, or refunds units of
// it: the reset and the refund reach A's deny cache (pub/sub), instead of
// A answering 429 until the cached RetryAfter.
func testRedisDenyCacheAcrossInstances(t *testing.T, drv Driver) {
	srv := redistest.Start(t)
	p := core.Policy{Name: "across", Rules: []core.Rule{{Limit: 2, Window: time.Hour}}}
	a := testkit.Limiter(t, drv.New(t, srv), p, core.WithTimeout(5*time.Second))
	b := testkit.Limiter(t, drv.New(t, srv), p, core.WithTimeout(5*time.Second))
	ctx := context.Background()
	// cached fills key on A until A answers it from its deny cache.
	cached := func(key string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			d, err := a.Allow(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if d.Source == core.SourceCache {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Fatalf("A never answered %s from its deny cache", key)
	}
	// admittedByA waits until A admits key, and fails after a second.
	admittedByA := func(what, key string) {
		t.Helper()
		start := time.Now()
		for time.Since(start) < time.Second {
			d, err := a.Allow(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				t.Logf("%s: A admits %s again after %v", what, key, time.Since(start).Round(time.Millisecond))
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
		t.Errorf("%s: A still denies %s a second later, want the reset seen at once", what, key)
	}

	cached("alice")
	if err := b.Reset(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	admittedByA("reset on B", "alice")

	// Count-only-failures: B reserved a unit, A fills the key and caches
	// its denial, then B refunds: A admits one more.
	d, err := b.Allow(ctx, "bob")
	if err != nil || !d.Allowed {
		t.Fatalf("B Allow(bob) = %+v, %v", d, err)
	}
	cached("bob")
	if err := d.Refund(ctx); err != nil {
		t.Fatal(err)
	}
	admittedByA("refund on B", "bob")
}

// testPeekIsNotADecision: a peek that meets a failing store does not
// count toward the circuit breaker. (That a peek is not reported as a
// decision is core's TestPeekIsNotADecision, on a MemoryStore.)
func testPeekIsNotADecision(t *testing.T, drv Driver) {
	var opens atomic.Int64
	obs := core.ObserverFunc(func(_ context.Context, e core.Event) {
		if e.Kind == core.EventBreakerOpen {
			opens.Add(1)
		}
	})
	ctx := context.Background()
	srv := redistest.Start(t)
	failing := testkit.Limiter(t, drv.New(t, srv), core.Policy{Name: "peek", Rules: []core.Rule{{Limit: 1, Window: time.Minute}}},
		core.WithObserver(obs), core.WithBreaker(2, time.Minute))
	srv.Stop()
	for range 5 {
		if _, err := failing.Peek(ctx, "k"); err != nil {
			t.Fatal(err)
		}
	}
	if n := opens.Load(); n != 0 {
		t.Errorf("5 failed peeks opened the breaker %d times, want 0", n)
	}
}

// testRedisClientTimeTTL: with a client clock behind the server's, a key
// lives until its window has passed in the client's time.
func testRedisClientTimeTTL(t *testing.T, drv Driver) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	store := drv.New(t, srv)
	const lag = 30 * time.Second
	slow := func() time.Time { return time.Now().Add(-lag) }
	l := testkit.Limiter(t, store, core.Policy{Name: "slow", Rules: []core.Rule{{Limit: 1, Window: time.Second}}},
		// What Redis holds is the point: no fallback on a busy machine.
		core.WithClock(slow), core.WithTimeout(10*time.Second))
	ctx := context.Background()
	if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed || d.Source != core.SourceStore {
		t.Fatalf("Allow = %+v, %v", d, err)
	}
	if ttl := rdb.PTTL(ctx, store.Key("slow", "k")).Val(); ttl < lag+time.Second {
		t.Errorf("PTTL with a client clock %v behind = %v, want at least %v (the window in the client's time)", lag, ttl, lag+time.Second)
	}
	if d, _ := l.Allow(ctx, "k"); d.Allowed {
		t.Errorf("second Allow within the window = %+v, want denied", d)
	}

	// A write that trims dead entries without renewing the TTL keeps the
	// lag too. The client clock starts a minute behind and is stepped:
	// 0 s: 1 unit (TTL set until 20 s); 5 s: 20 units; 10.2 s: 1 unit
	// (TTL renewed until 30.2 s); 15.5 s: 1 unit, trimming the 21 entries
	// older than 5.5 s, TTL left at 30.2 s in the client's time, which is
	// 14.7 s plus the clock's lag of about 44.5 s in the server's.
	base := time.Now().Add(-time.Minute)
	var step atomic.Int64
	stepped := func() time.Time { return base.Add(time.Duration(step.Load())) }
	l2 := testkit.Limiter(t, store, core.Policy{Name: "stepped", Rules: []core.Rule{{Limit: 1000, Window: 10 * time.Second}}},
		core.WithClock(stepped), core.WithTimeout(10*time.Second))
	for _, s := range []struct {
		at time.Duration
		n  int64
	}{{0, 1}, {5 * time.Second, 20}, {10200 * time.Millisecond, 1}, {15500 * time.Millisecond, 1}} {
		step.Store(int64(s.at))
		if d, err := l2.AllowN(ctx, "k", s.n); err != nil || !d.Allowed {
			t.Fatalf("AllowN(%d) at %v = %+v, %v", s.n, s.at, d, err)
		}
	}
	if n := len(scores(t, rdb, store.Key("stepped", "k"))); n != 2 {
		t.Errorf("entries after the trim = %d, want 2", n)
	}
	if ttl := rdb.PTTL(ctx, store.Key("stepped", "k")).Val(); ttl < 50*time.Second {
		t.Errorf("PTTL after a trimming write = %v, want about 59 s (14.7 s left in the client's time plus its lag)", ttl)
	}
}

// testRedisTimeoutWhilePaused: with Redis paused and a client on default
// options (go-redis ignores deadlines on them), every decision returns
// within the limiter's timeout (20 ms) plus scheduling, decided locally
// (FailLocal): with the breaker, five time out and the breaker answers the
// rest at once; without one, every call waits out the timeout, alone or
// 32 at once. (Merged with rueidisstore's TestPaused.)
func testRedisTimeoutWhilePaused(t *testing.T, drv Driver) {
	const pause = 2 * time.Second
	srv := redistest.Start(t)
	store := drv.New(t, srv) // default options
	warm(t, store)
	obs := &testkit.EventCounts{}
	p := core.Policy{Name: "paused", Rules: []core.Rule{{Limit: 3, Window: time.Minute}}}
	withBreaker := testkit.Limiter(t, store, p, core.WithObserver(obs))
	noBreaker := testkit.Limiter(t, store, core.Policy{Name: "paused-nb", Rules: p.Rules}, core.WithBreaker(0, 0))
	ctx := context.Background()
	for _, l := range []*core.Limiter{withBreaker, noBreaker} {
		if d, err := l.Allow(ctx, "warm"); err != nil || d.Source != core.SourceStore {
			t.Fatalf("Allow(warm) before the pause = %+v, %v; want a decision of the store", d, err)
		}
	}

	srv.Pause(pause)
	pausedAt := time.Now()
	limit := defaultTimeout + latencyMargin
	check := func(l *core.Limiter, key string) (core.Decision, time.Duration) {
		t.Helper()
		start := time.Now()
		d, err := l.Allow(ctx, key)
		lat := time.Since(start)
		if err != nil {
			t.Fatalf("Allow(%s) while paused: %v", key, err)
		}
		if d.Source != core.SourceLocal {
			t.Errorf("Allow(%s) while paused = %+v, want Source local (FailLocal)", key, d)
		}
		return d, lat
	}

	// The default limiter: 5 calls time out, then the breaker answers.
	var timedOut, open []time.Duration
	for i := range 10 {
		d, lat := check(withBreaker, "k")
		if want := i < 3; d.Allowed != want {
			t.Errorf("Allow(k) #%d while paused = %+v, want Allowed=%v (Limit 3, limited locally)", i+1, d, want)
		}
		if i < 5 {
			timedOut = append(timedOut, lat)
		} else {
			open = append(open, lat)
		}
	}
	if got := obs.Count(core.EventStoreError); got != 5 {
		t.Errorf("EventStoreError count = %d, want 5", got)
	}
	if got := obs.Count(core.EventBreakerOpen); got != 1 {
		t.Errorf("EventBreakerOpen count = %d, want 1", got)
	}
	for _, lat := range timedOut {
		if lat < defaultTimeout {
			t.Errorf("a store call returned after %v while paused, before the %v timeout", lat, defaultTimeout)
		}
	}

	// Without a breaker every call waits out the timeout, one at a time
	// and 32 at once.
	var serial, concurrent []time.Duration
	for range 20 {
		_, lat := check(noBreaker, "k")
		serial = append(serial, lat)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			start := time.Now()
			d, err := noBreaker.Allow(ctx, "c")
			lat := time.Since(start)
			if err != nil || d.Source != core.SourceLocal {
				t.Errorf("concurrent Allow(c) while paused = %+v, %v; want Source local", d, err)
			}
			mu.Lock()
			concurrent = append(concurrent, lat)
			mu.Unlock()
		})
	}
	wg.Wait()
	if elapsed := time.Since(pausedAt); elapsed > pause-100*time.Millisecond {
		t.Fatalf("the checks took %v of a %v pause: too slow to tell", elapsed, pause)
	}
	checkLatencies(t, "paused, breaker closed", timedOut, limit)
	checkLatencies(t, "paused, breaker open", open, limit)
	checkLatencies(t, "paused, no breaker, serial", serial, limit)
	checkLatencies(t, "paused, no breaker, concurrent", concurrent, limit)
	t.Logf("timed out (breaker closed): %s", durations(timedOut))
	t.Logf("breaker open:               %s", durations(open))
	t.Logf("no breaker, serial:         %s", durations(serial))
	t.Logf("no breaker, 32 concurrent:  %s", durations(concurrent))

	// After the pause the store decides again.
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, err := noBreaker.Allow(ctx, "after")
		if err == nil && d.Source == core.SourceStore {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after the pause: Allow = %+v, %v; want the store's decision", d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// testRedisDown stops Redis mid-test under each failure policy: decisions
// behave as the policy says within the timeout, the breaker then answers
// without calling Redis, decisions come from Redis again once it is back,
// and no goroutine is left behind.
func testRedisDown(t *testing.T, drv Driver) {
	const (
		limit    = 3
		cooldown = 300 * time.Millisecond
	)
	for _, tc := range []struct {
		policy core.FailurePolicy
		want   func(i int, d core.Decision) bool
		desc   string
	}{
		{core.FailLocal, func(i int, d core.Decision) bool {
			return d.Source == core.SourceLocal && d.Allowed == (i < limit)
		}, "limited locally: the first 3 allowed, then denied, Source local"},
		{core.FailOpen, func(i int, d core.Decision) bool {
			return d.Source == core.SourceOpen && d.Allowed
		}, "allowed, Source open"},
		{core.FailClosed, func(i int, d core.Decision) bool {
			return d.Source == core.SourceClosed && !d.Allowed && d.RetryAfter >= time.Second
		}, "denied, Source closed, RetryAfter >= 1s"},
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			// Registered first, so it runs last: after the client is
			// closed and the server stopped.
			ignore := goleak.IgnoreCurrent()
			t.Cleanup(func() { testkit.VerifyNoLeaks(t, ignore) })

			srv := redistest.Start(t)
			var sent atomic.Int64 // the commands the store's client sends
			obs := &testkit.EventCounts{}
			store := drv.Open(t, on(srv, Conf{Commands: &sent}))
			warm(t, store)
			l := testkit.Limiter(t, store, core.Policy{Name: "down", Rules: []core.Rule{{Limit: limit, Window: time.Minute}}},
				core.WithFailurePolicy(tc.policy), core.WithBreaker(5, cooldown), core.WithObserver(obs))
			ctx := context.Background()
			if d, err := l.Allow(ctx, "warm"); err != nil || d.Source != core.SourceStore {
				t.Fatalf("Allow(warm) = %+v, %v; want a decision of the store", d, err)
			}

			srv.Stop()
			var failing, open []time.Duration
			for i := range 12 {
				calls := sent.Load()
				start := time.Now()
				d, err := l.Allow(ctx, "k")
				lat := time.Since(start)
				if err != nil {
					t.Fatalf("Allow(k) #%d with Redis down: %v", i+1, err)
				}
				if !tc.want(i, d) {
					t.Errorf("Allow(k) #%d with Redis down = %+v, want %s", i+1, d, tc.desc)
				}
				if i < 5 {
					failing = append(failing, lat)
					continue
				}
				open = append(open, lat)
				if got := sent.Load() - calls; got != 0 {
					t.Errorf("Allow(k) #%d with the breaker open sent %d commands, want none", i+1, got)
				}
			}
			if got := obs.Count(core.EventStoreError); got != 5 {
				t.Errorf("EventStoreError count = %d, want 5", got)
			}
			if got := obs.Count(core.EventBreakerOpen); got != 1 {
				t.Errorf("EventBreakerOpen count = %d, want 1", got)
			}
			checkLatencies(t, "Redis down, breaker closed", failing, defaultTimeout+latencyMargin)
			// Near zero: no store call (the client sent no command).
			checkLatencies(t, "Redis down, breaker open", open, 10*time.Millisecond)
			t.Logf("Redis down, breaker closed: %s", durations(failing))
			t.Logf("Redis down, breaker open:   %s", durations(open))

			srv.Restart()
			restarted := time.Now()
			// Waits on keys of their own: what the failure policy admits of
			// a key counts in the store once it answers.
			for n := 0; ; n++ {
				d, err := l.Allow(ctx, fmt.Sprint("wait-", n))
				if err != nil {
					t.Fatal(err)
				}
				if d.Source == core.SourceStore {
					break
				}
				if time.Since(restarted) > 5*time.Second {
					t.Fatalf("Allow 5 s after Redis restarted = %+v, want a decision of the store", d)
				}
				time.Sleep(10 * time.Millisecond)
			}
			t.Logf("decisions from Redis again %v after the restart (cool-down %v)", time.Since(restarted), cooldown)
			if got := obs.Count(core.EventBreakerClose); got != 1 {
				t.Errorf("EventBreakerClose count = %d, want 1", got)
			}
			for i := range limit {
				if d, _ := l.Allow(ctx, "after"); d.Source != core.SourceStore || !d.Allowed || d.Remaining != int64(limit-1-i) {
					t.Errorf("Allow(after) #%d after recovery = %+v, want allowed by the store, Remaining %d", i+1, d, limit-1-i)
				}
			}
		})
	}
}
