package rueidisstore_test

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/internal/redislib"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/ratekit/ratekit/rueidisstore"
)

// newClient returns a rueidis client of the servers at addrs (one server,
// or the nodes of a Cluster), closed when t ends.
func newClient(t testing.TB, addrs ...string) rueidis.Client {
	t.Helper()
	return newClientOpt(t, rueidis.ClientOption{InitAddress: addrs})
}

// newClientOpt returns a rueidis client built with opt, closed when t
// ends.
func newClientOpt(t testing.TB, opt rueidis.ClientOption) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatalf("rueidis.NewClient(%v): %v", opt.InitAddress, err)
	}
	t.Cleanup(c.Close)
	return c
}

// newStore returns a store on client, closed when t ends (before the
// client).
func newStore(t testing.TB, client rueidis.Client, opts ...rueidisstore.Option) *rueidisstore.Store {
	t.Helper()
	s := rueidisstore.New(client, opts...)
	t.Cleanup(s.Close)
	return s
}

// TestCluster: 3000 users' keys spread over the three masters of a
// Cluster, each decided on its own slot, and named in partitions as
// redisstore names them: the address of their master. (The store suite
// on a Cluster, and Check, run in redissuite's RedisCluster.)
func TestCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	client := newClient(t, c.Addrs()...)
	if m := client.Mode(); m != rueidis.ClientModeCluster {
		t.Fatalf("client mode %v, want cluster", m)
	}
	t.Run("Spread", func(t *testing.T) {
		const users = 3000
		store := newStore(t, client, rueidisstore.WithPrefix("spread"))
		l := testkit.Limiter(t, store, core.Policy{Name: "users", Rules: []core.Rule{{Limit: 5, Window: time.Minute}}},
			core.WithTimeout(5*time.Second))
		ctx := context.Background()
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for u := g; u < users; u += 8 {
					if d, err := l.Allow(ctx, fmt.Sprint("u", u)); err != nil || !d.Allowed || d.Source != core.SourceStore {
						t.Errorf("Allow(u%d) = %+v, %v; want admitted by the store", u, d, err)
						return
					}
				}
			})
		}
		wg.Wait()
		perMaster := make(map[int]int)
		gr := redisstore.New(c.Client(t), redisstore.WithPrefix("spread"))
		if d, err := testkit.Limiter(t, gr, core.Policy{Name: "users", Rules: []core.Rule{{Limit: 5, Window: time.Minute}}},
			core.WithTimeout(5*time.Second)).Peek(ctx, "u0"); err != nil || d.Source != core.SourceStore {
			t.Fatalf("Peek(u0) on redisstore = %+v, %v", d, err)
		}
		testkit.WaitUntil(t, "both stores know the slot map", func() bool {
			return strings.Contains(store.Partition("users", "u0"), ":") && strings.Contains(gr.Partition("users", "u0"), ":")
		})
		for u := range users {
			key := fmt.Sprint("u", u)
			owner := c.SlotOwner(redistest.Slot(store.Key("users", key)))
			perMaster[owner]++
			p := store.Partition("users", key)
			if want := gr.Partition("users", key); p != want {
				t.Fatalf("Partition(users, %s) = %q, redisstore names it %q", key, p, want)
			}
			if want := c.Node(owner).Addr(); p != want {
				t.Fatalf("Partition(users, %s) = %q, want %q, the address of the master of its slot", key, p, want)
			}
		}
		if len(perMaster) != 3 {
			t.Errorf("keys on %d masters, want 3: %v", len(perMaster), perMaster)
		}
		for u := 0; u < users; u += 60 {
			// Each key is on the master of its slot.
			k := store.Key("users", fmt.Sprint("u", u))
			if n, _ := c.Node(c.SlotOwner(redistest.Slot(k))).Do(t, "STRLEN", k).(int64); n == 0 {
				t.Fatalf("%s is not on the master of its slot", k)
			}
		}
	})
}

// hammer runs instances limiters of p, each on a rueidis client of its
// own, with goroutines each sending each Allow(key) at once from one
// start, and returns how many were allowed; it fails t on an error or a
// fallback decision.
func hammer(t *testing.T, ls []*core.Limiter, goroutines, each int, key string) int64 {
	t.Helper()
	var allowed, fallbacks atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, l := range ls {
		for range goroutines {
			wg.Go(func() {
				<-start
				for range each {
					d, err := l.Allow(context.Background(), key)
					switch {
					case err != nil:
						t.Errorf("Allow(%s): %v", key, err)
						return
					case d.Source.Fallback():
						fallbacks.Add(1)
					case d.Allowed:
						allowed.Add(1)
					}
				}
			})
		}
	}
	close(start)
	wg.Wait()
	if n := fallbacks.Load(); n != 0 {
		t.Errorf("%d decisions were fallbacks, want 0: the store must decide every one", n)
	}
	return allowed.Load()
}

// TestSharedWithRedisstore: instances on rueidis and on go-redis share one
// Redis and one prefix: they decide one key's window together, exactly,
// and see each other's resets.
func TestSharedWithRedisstore(t *testing.T) {
	const limit = 300
	srv := redistest.Start(t)
	p := core.Policy{Name: "mixed", Rules: []core.Rule{{Limit: limit, Window: time.Minute}}}
	ls := []*core.Limiter{
		testkit.Limiter(t, newStore(t, newClient(t, srv.Addr())), p, core.WithTimeout(2*time.Second)),
		testkit.Limiter(t, redisstore.New(srv.Client(t)), p, core.WithTimeout(2*time.Second)),
		testkit.Limiter(t, newStore(t, newClient(t, srv.Addr())), p, core.WithTimeout(2*time.Second)),
		testkit.Limiter(t, redisstore.New(srv.Client(t)), p, core.WithTimeout(2*time.Second)),
	}
	if got := hammer(t, ls, 16, 10, "k"); got != limit {
		t.Errorf("2 rueidis and 2 go-redis instances: %d allowed, want exactly %d", got, limit)
	}
	ctx := context.Background()
	if err := ls[0].Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if d, err := ls[1].Peek(ctx, "k"); err != nil || d.Rules()[0].Used != 0 {
		t.Errorf("go-redis Peek(k) after a reset on rueidis = %+v, %v; want Used 0", d, err)
	}
	if d, err := ls[1].AllowN(ctx, "k", 3); err != nil || !d.Allowed {
		t.Fatalf("go-redis AllowN(k, 3) = %+v, %v", d, err)
	}
	if d, err := ls[2].Peek(ctx, "k"); err != nil || d.Rules()[0].Used != 3 {
		t.Errorf("rueidis Peek(k) after 3 units on go-redis = %+v, %v; want Used 3", d, err)
	}
}

// TestRefusedWithRedisstore: instances on rueidis and on go-redis add
// their refusals to the same sets: TopRefused on either sums them.
func TestRefusedWithRedisstore(t *testing.T) {
	srv := redistest.Start(t)
	p := core.Policy{Name: "mixed-refused", Rules: []core.Rule{{Limit: 1, Window: time.Hour}}}
	ru := testkit.Limiter(t, newStore(t, newClient(t, srv.Addr())), p, core.WithTimeout(2*time.Second))
	gr := testkit.Limiter(t, redisstore.New(srv.Client(t)), p, core.WithTimeout(2*time.Second))
	ctx := context.Background()
	for _, c := range []struct {
		l    *core.Limiter
		key  string
		asks int
	}{{ru, "k1", 4}, {gr, "k1", 2}, {gr, "k2", 5}, {ru, "k3", 2}} {
		for range c.asks {
			if _, err := c.l.Allow(ctx, c.key); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Each instance adds its own refusals when asked: once both were
	// asked, either sees both.
	for _, l := range []*core.Limiter{gr, ru} {
		if _, err := l.TopRefused(ctx, 10); err != nil {
			t.Fatal(err)
		}
	}
	want := []core.RefusedKey{{Key: "k1", Refusals: 5}, {Key: "k2", Refusals: 4}, {Key: "k3", Refusals: 1}}
	for name, l := range map[string]*core.Limiter{"rueidis": ru, "go-redis": gr} {
		if got, err := l.TopRefused(ctx, 10); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: TopRefused = %v, %v; want %v", name, got, err, want)
		}
	}
}

// TestWatchResyncs: a watcher hears a Resync when the subscription is
// confirmed, the invalidations of its policy's keys from any instance (a
// reset, as the plain message and as its own; a tier), and a Resync again
// after its connection is killed.
func TestWatchResyncs(t *testing.T) {
	srv := redistest.Start(t)
	a := newStore(t, newClient(t, srv.Addr()))
	b := newStore(t, newClient(t, srv.Addr()))
	heard := make(chan driver.Invalidation, 16)
	a.Watch("w", func(inv driver.Invalidation) { heard <- inv })
	next := func(want driver.Invalidation) {
		t.Helper()
		select {
		case got := <-heard:
			if got != want {
				t.Fatalf("heard %+v, want %+v", got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("heard nothing in 5 s, want %+v", want)
		}
	}
	next(driver.Invalidation{Resync: true})
	ctx := context.Background()
	if err := b.Reset(ctx, driver.Query{Policy: "w", Key: "k1"}); err != nil {
		t.Fatal(err)
	}
	next(driver.Invalidation{Key: "k1"})
	next(driver.Invalidation{Key: "k1", Reset: true}) // a reset's own, after the plain one
	if err := b.Invalidate(ctx, "w", "k2"); err != nil {
		t.Fatal(err)
	}
	next(driver.Invalidation{Key: "k2", Tier: true})
	if err := b.Reset(ctx, driver.Query{Policy: "other", Key: "k3"}); err != nil {
		t.Fatal(err)
	}
	// The subscriber's connection dies: rueidis subscribes again, and
	// the watcher resyncs.
	srv.Do(t, "CLIENT", "KILL", "TYPE", "pubsub")
	next(driver.Invalidation{Resync: true})
	if err := b.Reset(ctx, driver.Query{Policy: "w", Key: "k4"}); err != nil {
		t.Fatal(err)
	}
	next(driver.Invalidation{Key: "k4"})
}

// TestFleet: three instances on one Redis, two on rueidis and one on
// go-redis, count three; when Redis stops, each admits its share of the
// limit under FailLocal, ⌊6/3⌋ = 2, so a fresh key gets 6 in all.
func TestFleet(t *testing.T) {
	const limit = 6
	srv := redistest.Start(t)
	p := core.Policy{Name: "share", Rules: []core.Rule{{Limit: limit, Window: time.Minute}}}
	fleets := []driver.Fleet{
		newStore(t, newClient(t, srv.Addr())),
		newStore(t, newClient(t, srv.Addr())),
		redisstore.New(srv.Client(t)),
	}
	ls := make([]*core.Limiter, len(fleets))
	counts := make([]func() int, len(fleets))
	for i, f := range fleets {
		ls[i] = testkit.Limiter(t, f.(core.Store), p, core.WithBreaker(0, 0), core.WithTimeout(time.Second))
		counts[i] = f.Join(driver.Member{Policy: p.Name}) // the limiter joined it: this counts once
	}
	deadline := time.Now().Add(10 * time.Second)
	for i, n := range counts {
		for n() != len(fleets) {
			if time.Now().After(deadline) {
				t.Fatalf("instance %d counts %d instances, want %d", i, n(), len(fleets))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	ctx := context.Background()
	for _, l := range ls {
		if d, err := l.Peek(ctx, "warm"); err != nil || d.Source != core.SourceStore {
			t.Fatalf("Peek(warm) = %+v, %v; want the store's answer", d, err)
		}
	}
	srv.Stop()
	admitted := 0
	for i, l := range ls {
		for range 2 * limit {
			d, err := l.Allow(ctx, "fresh")
			if err != nil {
				t.Fatal(err)
			}
			if d.Source != core.SourceLocal {
				t.Fatalf("instance %d: Allow(fresh) with Redis stopped = %+v, want Source local", i, d)
			}
			if d.Allowed {
				admitted++
			}
		}
	}
	if admitted != limit {
		t.Errorf("admitted during the outage by 3 instances: %d, want %d (2 each)", admitted, limit)
	}
}

// TestConfigPanicsNameTheOption: the constructor panics, at
// construction, with a message naming what is wrong.
func TestConfigPanicsNameTheOption(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr())
	for _, tc := range []struct {
		name string
		f    func()
		want string
	}{
		{"New nil", func() { rueidisstore.New(nil) }, "rueidisstore.New"},
		{"WithBatching zero", func() { rueidisstore.New(client, rueidisstore.WithBatching(0)) }, "WithBatching"},
		{"WithBatching too many", func() { rueidisstore.New(client, rueidisstore.WithBatching(1001)) }, "WithBatching"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				msg := fmt.Sprint(recover())
				if !strings.HasPrefix(msg, "ratekit: ") || !strings.Contains(msg, tc.want) {
					t.Errorf("panic %q, want a message starting with \"ratekit: \" naming %s", msg, tc.want)
				}
			}()
			tc.f()
		})
	}
}

// TestGoroutinesEnd: the store's goroutines (the subscription, the
// fleet's announcements) end once its client is closed, on one Redis and
// on a Cluster; and with Close, after a failed dial too, when rueidis no
// longer says the client closed.
func TestGoroutinesEnd(t *testing.T) {
	srv := redistest.Start(t)
	c := redistest.StartCluster(t)
	// running starts a store on a client of addrs with a limiter that
	// watches it and joins its fleet, and waits for its goroutines.
	running := func(t *testing.T, addrs ...string) (rueidis.Client, *rueidisstore.Store) {
		t.Helper()
		client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs})
		if err != nil {
			t.Fatal(err)
		}
		store := rueidisstore.New(client)
		l := testkit.Limiter(t, store, core.Policy{Name: "g", Rules: []core.Rule{{Limit: 1, Window: time.Second}}},
			core.WithTimeout(5*time.Second))
		if d, err := l.Allow(context.Background(), "k"); err != nil || d.Source != core.SourceStore {
			t.Fatalf("Allow = %+v, %v", d, err)
		}
		if !goroutinesOf(store, time.Second) {
			t.Fatal("no goroutine of the store runs: the test would prove nothing")
		}
		return client, store
	}
	// ended fails t unless the goroutines of store end within d.
	ended := func(t *testing.T, store *rueidisstore.Store, d time.Duration) {
		t.Helper()
		deadline := time.Now().Add(d)
		for goroutinesOf(store, 0) {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				t.Fatalf("goroutines of the store still run:\n%s", buf[:runtime.Stack(buf, true)])
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for name, addrs := range map[string][]string{"standalone": {srv.Addr()}, "cluster": c.Addrs()} {
		t.Run("client closed, "+name, func(t *testing.T) {
			client, store := running(t, addrs...)
			client.Close()
			ended(t, store, redislib.FleetBeat+time.Second) // the announcements end within a beat
		})
	}
	t.Run("store closed after a failed dial", func(t *testing.T) {
		srv := redistest.Start(t)
		client, store := running(t, srv.Addr())
		srv.Stop()
		// A dial fails.
		if err := store.Check(context.Background()); err == nil {
			t.Fatal("Check() on a stopped Redis = nil")
		}
		client.Close()
		store.Close()
		ended(t, store, 0)
	})
}

// goroutinesOf reports whether a goroutine of store runs, waiting up to d
// for one to show.
func goroutinesOf(store *rueidisstore.Store, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		for _, f := range []string{"receive", "announceEvery", "announce"} {
			if strings.Contains(stacks, fmt.Sprintf("rueidisstore.(*Store).%s(%p", f, store)) {
				return true
			}
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}
