package rueidisstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redistest"
	"github.com/ratekit/ratekit/internal/testkit"
	"github.com/ratekit/ratekit/rueidisstore"
)

// latencyMargin is what a decision may take beyond the limiter's timeout
// before a test calls the timeout broken: scheduling on a loaded 2-core
// machine under -race.
const latencyMargin = 80 * time.Millisecond

// checkLatencies fails t unless the median latency and three quarters of
// them are within bound: single outliers are scheduling stalls of a
// loaded machine, a bound that does not hold shows in nearly every call.
func checkLatencies(t *testing.T, what string, lats []time.Duration, bound time.Duration) {
	t.Helper()
	if len(lats) == 0 {
		return
	}
	sorted := slices.Clone(lats)
	slices.Sort(sorted)
	over := 0
	for _, l := range sorted {
		if l > bound {
			over++
		}
	}
	if med := sorted[len(sorted)/2]; med > bound || 4*over > len(lats) {
		t.Errorf("%s: median %v, %d of %d decisions over %v, want the median and three quarters within it: %v",
			what, med, over, len(lats), bound, sorted)
	} else {
		t.Logf("%s: median %v, max %v", what, med, sorted[len(sorted)-1])
	}
}

// counter counts the events a limiter reports.
type counter struct {
	mu sync.Mutex
	n  map[core.EventKind]int
}

func (c *counter) Observe(_ context.Context, e core.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = make(map[core.EventKind]int)
	}
	c.n[e.Kind]++
}

func (c *counter) count(k core.EventKind) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[k]
}

// TestPaused: with Redis paused and a rueidis client on default options,
// every decision returns within the limiter's timeout (20 ms) plus
// scheduling, decided by the failure policy (FailLocal): with the breaker,
// five time out and the breaker answers the rest at once; without one,
// every call waits out the timeout, alone or 32 at once.
func TestPaused(t *testing.T) {
	const pause = 2 * time.Second
	srv := redistest.Start(t)
	store := newStore(t, newClient(t, srv.Addr()))
	obs := &counter{}
	p := core.Policy{Name: "paused", Rules: []core.Rule{{Limit: 3, Window: time.Minute}}}
	withBreaker := testkit.Limiter(t, store, p, core.WithObserver(obs))
	noBreaker := testkit.Limiter(t, store, core.Policy{Name: "paused-nb", Rules: p.Rules}, core.WithBreaker(0, 0))
	ctx := context.Background()
	warm := testkit.Limiter(t, store, core.Policy{Name: "warm", Rules: p.Rules}, core.WithTimeout(5*time.Second))
	if d, err := warm.Allow(ctx, "warm"); err != nil || d.Source != core.SourceStore {
		t.Fatalf("warming the store: %+v, %v", d, err)
	}
	for _, l := range []*core.Limiter{withBreaker, noBreaker} {
		if d, err := l.Allow(ctx, "warm"); err != nil || d.Source != core.SourceStore {
			t.Fatalf("Allow(warm) before the pause = %+v, %v; want a decision of the store", d, err)
		}
	}

	srv.Pause(pause)
	pausedAt := time.Now()
	bound := core.DefaultTimeout + latencyMargin
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
	if got := obs.count(core.EventStoreError); got != 5 {
		t.Errorf("EventStoreError count = %d, want 5", got)
	}
	if got := obs.count(core.EventBreakerOpen); got != 1 {
		t.Errorf("EventBreakerOpen count = %d, want 1", got)
	}
	for _, lat := range timedOut {
		if lat < core.DefaultTimeout {
			t.Errorf("a store call returned after %v while paused, before the %v timeout", lat, core.DefaultTimeout)
		}
	}
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
	checkLatencies(t, "paused, breaker closed", timedOut, bound)
	checkLatencies(t, "paused, breaker open", open, bound)
	checkLatencies(t, "paused, no breaker, serial", serial, bound)
	checkLatencies(t, "paused, no breaker, 32 concurrent", concurrent, bound)

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

// commandCalls returns how many times srv ran cmd (INFO commandstats).
func commandCalls(t *testing.T, srv *redistest.Server, cmd string) int64 {
	t.Helper()
	info, _ := srv.Do(t, "INFO", "commandstats").(string)
	for _, line := range strings.Split(info, "\r\n") {
		rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":calls=")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
		if err != nil {
			t.Fatalf("INFO commandstats: %q: %v", line, err)
		}
		return n
	}
	return 0
}

// TestLostReplyCountedOnce: the reply to a decision is lost after Redis
// ran it. rueidis does not send the script call again (it retries only
// read-only commands): the decision falls back to the failure policy, and
// Redis holds the units once.
func TestLostReplyCountedOnce(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	// One connection (rueidis opens one more per GOMAXPROCS doubling, each
	// on first use), and no background PING in the test's time: the next
	// request the proxy sees is the decision's.
	client := newClientOpt(t, rueidis.ClientOption{InitAddress: []string{proxy.Addr()},
		PipelineMultiplex: -1, Dialer: net.Dialer{KeepAlive: time.Minute}, DisableCache: true})
	store := newStore(t, client)
	const limit = 10
	p := core.Policy{Name: "retry", Rules: []core.Rule{{Limit: limit, Window: time.Minute}}}
	// Long enough for rueidis to reconnect and retry, if it did; neither
	// a subscription (no deny cache) nor the fleet's announcements (the
	// whole limit locally) share the connection.
	l := testkit.Limiter(t, store, p, core.WithTimeout(3*time.Second), core.WithDenyCache(0), core.WithLocalShare(false))
	ctx := context.Background()
	if d, err := l.Allow(ctx, "warm"); err != nil || d.Source != core.SourceStore {
		t.Fatalf("Allow(warm) = %+v, %v", d, err)
	}
	for _, n := range []int64{1, 3} {
		t.Run(fmt.Sprintf("AllowN %d", n), func(t *testing.T) {
			key := fmt.Sprintf("k%d", n)
			calls, dropped := commandCalls(t, srv, "fcall"), proxy.Dropped()
			proxy.DropNextReply()
			d, err := l.AllowN(ctx, key, n)
			if err != nil {
				t.Fatal(err)
			}
			if got := proxy.Dropped() - dropped; got != 1 {
				t.Fatalf("replies dropped = %d, want 1", got)
			}
			if got := commandCalls(t, srv, "fcall") - calls; got != 1 {
				t.Fatalf("FCALL ran %d times, want 1 (no retry)", got)
			}
			if !d.Allowed || d.Source != core.SourceLocal {
				t.Errorf("AllowN(%s, %d) with a lost reply = %+v, want allowed by the local fallback", key, n, d)
			}
			// The store answers the next decision again, and holds the
			// units once.
			if d, err := l.Peek(ctx, key); err != nil || d.Source != core.SourceStore || d.Rules()[0].Used != n {
				t.Errorf("Peek(%s) after = %+v, %v; want the store's answer, Used %d (counted once)", key, d, err, n)
			}
		})
	}
}

// TestCheckMisconfigured: a store configured so that no decision can
// succeed is reported by Check as ErrMisconfigured, naming the reason, not
// as a Redis that does not answer yet; a Redis that is down is neither; an
// evicting Redis is unsafe; a Redis that fits passes.
func TestCheckMisconfigured(t *testing.T) {
	p := core.Policy{Name: "mis", Rules: []core.Rule{{Limit: 1, Window: time.Minute}}}
	for _, tc := range []struct {
		name  string
		args  []string
		opt   func(srv *redistest.Server) rueidis.ClientOption
		after func(t *testing.T, srv *redistest.Server) // once the client is connected
		want  string                                    // in the error
	}{
		{name: "password changed",
			// The default user takes any password until one is set.
			opt: func(srv *redistest.Server) rueidis.ClientOption {
				return rueidis.ClientOption{InitAddress: []string{srv.Addr()}, Password: "guess"}
			},
			after: func(t *testing.T, srv *redistest.Server) {
				srv.Do(t, "CONFIG", "SET", "requirepass", "s3cret")
				srv.Do(t, "CLIENT", "KILL", "USER", "default", "SKIPME", "yes")
			},
			want: "WRONGPASS"},
		{name: "password required",
			opt: func(srv *redistest.Server) rueidis.ClientOption {
				return rueidis.ClientOption{InitAddress: []string{srv.Addr()}}
			},
			after: func(t *testing.T, srv *redistest.Server) {
				srv.Do(t, "CONFIG", "SET", "requirepass", "s3cret")
				srv.Do(t, "CLIENT", "KILL", "USER", "default", "SKIPME", "yes")
			},
			want: "NOAUTH"},
		{name: "no Lua", args: []string{"--rename-command", "EVAL", "", "--rename-command", "EVALSHA", "", "--rename-command", "FCALL", ""},
			opt: func(srv *redistest.Server) rueidis.ClientOption {
				return rueidis.ClientOption{InitAddress: []string{srv.Addr()}}
			},
			want: "unknown command"},
		{name: "fleet key of another type",
			opt: func(srv *redistest.Server) rueidis.ClientOption {
				return rueidis.ClientOption{InitAddress: []string{srv.Addr()}}
			},
			after: func(t *testing.T, srv *redistest.Server) { srv.Do(t, "SET", "ratekit:mis:fleet", "not a sorted set") },
			want:  "holds a string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t, redistest.WithArgs(tc.args...))
			store := newStore(t, newClientOpt(t, tc.opt(srv)))
			l := testkit.Limiter(t, store, p)
			if tc.after != nil {
				tc.after(t, srv)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := l.Check(ctx)
			// A connection killed by after answers EOF first: the server
			// does not answer yet; the next one is refused.
			for tc.after != nil && err != nil && !errors.Is(err, core.ErrMisconfigured) && ctx.Err() == nil {
				time.Sleep(10 * time.Millisecond)
				err = l.Check(ctx)
			}
			if !errors.Is(err, core.ErrMisconfigured) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Check() = %v, want ErrMisconfigured naming %q", err, tc.want)
			}
			if errors.Is(err, rueidisstore.ErrUnsafeEviction) || !strings.HasPrefix(err.Error(), "ratekit: rueidis store: ") {
				t.Errorf("Check() = %v, wraps ErrUnsafeEviction too, or lacks the prefix", err)
			}
			t.Logf("Check() = %v", err)
		})
	}
	t.Run("down", func(t *testing.T) {
		srv := redistest.Start(t)
		store := newStore(t, newClient(t, srv.Addr()))
		srv.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		err := store.Check(ctx)
		if err == nil || errors.Is(err, core.ErrMisconfigured) || errors.Is(err, rueidisstore.ErrUnsafeEviction) {
			t.Fatalf("Check() on a stopped Redis = %v, want an error that is neither misconfigured nor unsafe", err)
		}
	})
	t.Run("evicting", func(t *testing.T) {
		srv := redistest.Start(t, redistest.WithArgs("--maxmemory-policy", "allkeys-lru"))
		store := newStore(t, newClient(t, srv.Addr()))
		err := store.Check(context.Background())
		if !errors.Is(err, rueidisstore.ErrUnsafeEviction) || errors.Is(err, core.ErrMisconfigured) ||
			!strings.Contains(err.Error(), "allkeys-lru") || !strings.HasPrefix(err.Error(), "ratekit: rueidis store: ") {
			t.Fatalf("Check() on allkeys-lru = %v, want ErrUnsafeEviction naming the policy", err)
		}
	})
	t.Run("ok", func(t *testing.T) {
		srv := redistest.Start(t)
		store := newStore(t, newClient(t, srv.Addr()))
		testkit.Limiter(t, store, p)
		if err := store.Check(context.Background()); err != nil {
			t.Fatalf("Check() on a Redis that fits = %v, want nil", err)
		}
	})
}
