package redissuite

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redislib"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// testRedisCheckPolicies: Check flags every maxmemory-policy but
// noeviction, through CONFIG GET or, with CONFIG renamed away, through
// INFO memory.
func testRedisCheckPolicies(t *testing.T, drv Driver) {
	policies := []struct {
		policy string
		unsafe bool
	}{
		{"noeviction", false},
		{"allkeys-lru", true},
		{"allkeys-lfu", true},
		{"allkeys-random", true},
		{"volatile-lru", true},
		{"volatile-lfu", true},
		{"volatile-random", true},
		{"volatile-ttl", true},
	}
	for _, srvc := range []struct {
		name string
		args []string
	}{
		{"CONFIG", nil},
		{"INFO (CONFIG renamed)", []string{"--rename-command", "CONFIG", "ratekit-test-config"}},
		{"INFO (CONFIG not permitted)", nil},
	} {
		t.Run(srvc.name, func(t *testing.T) {
			srv := redistest.Start(t, redistest.WithArgs(append([]string{"--maxmemory", "2mb"}, srvc.args...)...))
			rdb := srv.Client(t) // as the store's client logs in
			conf := on(srv, Conf{})
			configCmd := "CONFIG"
			switch {
			case srvc.args != nil:
				configCmd = "ratekit-test-config"
			case strings.Contains(srvc.name, "permitted"):
				// As on managed services: the app's user may not run CONFIG.
				srv.Do(t, "ACL", "SETUSER", "app", "on", ">secret", "~*", "&*", "+@all", "-config")
				rdb = redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "app", Password: "secret"})
				t.Cleanup(func() { _ = rdb.Close() })
				conf.Username, conf.Password = "app", "secret"
			}
			if configCmd != "CONFIG" || rdb.Options().Username != "" {
				// Evidence that the store cannot use CONFIG here.
				if err := rdb.ConfigGet(context.Background(), "maxmemory-policy").Err(); err == nil {
					t.Fatal("CONFIG GET answered for the store's client")
				}
			}
			store := drv.Open(t, conf)
			for _, tc := range policies {
				t.Run(tc.policy, func(t *testing.T) {
					srv.Do(t, configCmd, "SET", "maxmemory-policy", tc.policy)
					err := store.Check(context.Background())
					if got := errors.Is(err, redislib.ErrUnsafeEviction); got != tc.unsafe {
						t.Fatalf("Check() with maxmemory-policy %s = %v, want unsafe=%v", tc.policy, err, tc.unsafe)
					}
					if tc.unsafe && (!strings.Contains(err.Error(), tc.policy) || !strings.Contains(err.Error(), srv.Addr()) ||
						!strings.Contains(err.Error(), "maxmemory 2097152 bytes")) {
						t.Errorf("Check() = %q, want the policy %s, the server %s and its maxmemory named", err, tc.policy, srv.Addr())
					}
				})
			}
		})
	}
}

// testRedisCheckFails: a server whose configuration cannot be read, or
// cannot be reached, fails the check with an error that is not
// ErrUnsafeEviction, by the context's deadline.
func testRedisCheckFails(t *testing.T, drv Driver) {
	t.Run("CONFIG and INFO not permitted", func(t *testing.T) {
		srv := redistest.Start(t)
		srv.Do(t, "ACL", "SETUSER", "app", "on", ">secret", "~*", "&*", "+@all", "-config", "-info")
		err := drv.Open(t, on(srv, Conf{Username: "app", Password: "secret"})).Check(context.Background())
		if err == nil || errors.Is(err, redislib.ErrUnsafeEviction) || !strings.Contains(err.Error(), "NOPERM") {
			t.Fatalf("Check() = %v, want a NOPERM error that is not ErrUnsafeEviction", err)
		}
		t.Logf("Check() = %v", err)
	})
	t.Run("paused", func(t *testing.T) {
		srv := redistest.Start(t)
		store := drv.New(t, srv) // default options (go-redis ignores deadlines on them)
		if err := store.Check(context.Background()); err != nil {
			t.Fatalf("Check() before the pause = %v", err)
		}
		srv.Pause(2 * time.Second)
		const deadline = 100 * time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		start := time.Now()
		err := store.Check(ctx)
		took := time.Since(start)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Check() while paused = %v, want context.DeadlineExceeded", err)
		}
		if took > deadline+latencyMargin {
			t.Errorf("Check() while paused took %v, want about the %v deadline", took, deadline)
		}
	})
	t.Run("stopped", func(t *testing.T) {
		srv := redistest.Start(t)
		store := drv.New(t, srv)
		srv.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		if err := store.Check(ctx); err == nil || errors.Is(err, redislib.ErrUnsafeEviction) {
			t.Errorf("Check() with Redis stopped = %v, want a connection error", err)
		}
	})
}

// testLimiterCheck: Limiter.Check reports a failed store check to the
// limiter's observers, once. (That it passes a MemoryStore is core's
// TestLimiterCheck.)
func testLimiterCheck(t *testing.T, drv Driver) {
	p := core.Policy{Name: "check", Rules: []core.Rule{{Limit: 1, Window: time.Minute}}}
	for _, tc := range []struct {
		policy string
		unsafe bool
	}{
		{"noeviction", false},
		{"allkeys-lru", true},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			srv := redistest.Start(t, redistest.WithArgs("--maxmemory-policy", tc.policy))
			obs := &testkit.EventCounts{}
			var kinds []core.EventKind
			rec := core.ObserverFunc(func(_ context.Context, e core.Event) {
				kinds = append(kinds, e.Kind)
				if e.Policy != p.Name {
					t.Errorf("event %v names policy %q, want %q", e.Kind, e.Policy, p.Name)
				}
			})
			l := testkit.Limiter(t, drv.New(t, srv), p, core.WithObserver(obs), core.WithObserver(rec))
			err := l.Check(context.Background())
			if got := errors.Is(err, redislib.ErrUnsafeEviction); got != tc.unsafe {
				t.Fatalf("Check() = %v, want unsafe=%v", err, tc.unsafe)
			}
			want := 0
			if tc.unsafe {
				want = 1
			}
			if got := obs.Count(core.EventStoreCheck); got != want {
				t.Errorf("EventStoreCheck count = %d, want %d (events %v)", got, want, kinds)
			}
			if errs := obs.Errs(); tc.unsafe && (len(errs) != 1 || !errors.Is(errs[0], redislib.ErrUnsafeEviction)) {
				t.Errorf("observed errors %v, want the ErrUnsafeEviction", errs)
			}
			if got := core.EventStoreCheck.String(); got != "store_check" {
				t.Errorf("EventStoreCheck.String() = %q", got)
			}
		})
	}
}

// testRedisEviction shows what Check warns of, on a Redis of 2 MB under
// memory pressure: with allkeys-lru, and with volatile-lru when the other
// keys have no TTL, the key of a denied client is evicted and the client
// is admitted again as if new; with noeviction it survives and the client
// stays denied, while the writes that do not fit fail.
func testRedisEviction(t *testing.T, drv Driver) {
	const limit = 3
	for _, tc := range []struct {
		policy  string
		evicted bool
	}{
		{"allkeys-lru", true},
		{"volatile-lru", true},
		{"noeviction", false},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			srv := redistest.Start(t, redistest.WithArgs("--maxmemory", "2mb", "--maxmemory-policy", tc.policy))
			rdb := srv.Client(t)
			store := drv.New(t, srv)
			if err := store.Check(context.Background()); errors.Is(err, redislib.ErrUnsafeEviction) != tc.evicted {
				t.Fatalf("Check() = %v, want unsafe=%v", err, tc.evicted)
			}
			p := core.Policy{Name: "evict", Rules: []core.Rule{{Limit: limit, Window: time.Minute}}}
			l := testkit.Limiter(t, store, p, core.WithDenyCache(0), core.WithTimeout(2*time.Second))
			ctx := context.Background()
			for i := range limit + 1 {
				d, err := l.Allow(ctx, "victim")
				if err != nil || d.Source != core.SourceStore || d.Allowed != (i < limit) {
					t.Fatalf("Allow(victim) #%d = %+v, %v; want from the store, Allowed=%v", i+1, d, err, i < limit)
				}
			}

			// Memory pressure: 4 MB of other keys without TTL, written in
			// pipelines of 100.
			value := strings.Repeat("x", 1024)
			var written, oom int
			for batch := range 40 {
				pipe := rdb.Pipeline()
				for i := range 100 {
					pipe.Set(ctx, "junk:"+strconv.Itoa(batch*100+i), value, 0)
				}
				cmds, _ := pipe.Exec(ctx)
				for _, c := range cmds {
					switch err := c.Err(); {
					case err == nil:
						written++
					case strings.HasPrefix(err.Error(), "OOM"):
						oom++
					default:
						t.Fatalf("SET: %v", err)
					}
				}
			}
			evicted := evictedKeys(t, rdb)
			exists, err := rdb.Exists(ctx, store.Key(p.Name, "victim")).Result()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %d SETs written, %d refused (OOM), %d keys evicted; the victim's key exists: %v",
				tc.policy, written, oom, evicted, exists == 1)
			if got := exists == 0; got != tc.evicted {
				t.Fatalf("victim key evicted = %v, want %v", got, tc.evicted)
			}
			d, err := l.Allow(ctx, "victim")
			if err != nil {
				t.Fatal(err)
			}
			// The store forgot the window: it admits as if new. When the
			// full Redis refuses the write, the failure policy decides,
			// from the admissions this instance made through the store.
			switch {
			case !tc.evicted:
			case d.Source == core.SourceStore && (!d.Allowed || d.Remaining != limit-1):
				t.Errorf("Allow(victim) after its key was evicted = %+v, want admitted as if new (Remaining %d)", d, limit-1)
			case d.Source == core.SourceLocal && d.Allowed:
				t.Errorf("Allow(victim) decided locally after its key was evicted = %+v, want denied: the instance admitted %d", d, limit)
			case d.Source != core.SourceStore && d.Source != core.SourceLocal:
				t.Errorf("Allow(victim) after its key was evicted = %+v, want a decision of the store or the local fallback", d)
			}
			if !tc.evicted && (d.Allowed || d.Source != core.SourceStore) {
				t.Errorf("Allow(victim) under noeviction = %+v, want still denied by the store", d)
			}
		})
	}
}

// evictedKeys returns the evicted_keys counter of INFO stats.
func evictedKeys(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "evicted_keys:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatal("INFO stats has no evicted_keys")
	return 0
}

// testRedisCheckMisconfigured: a store configured so that no decision
// can succeed is reported by Check as ErrMisconfigured, naming the
// reason, not as a Redis that does not answer yet, whether the server
// refused the client from the start or changed once it was connected; a
// Redis that is down is neither; an evicting Redis is unsafe; a Redis
// that fits passes. (Merged with rueidisstore's TestCheckMisconfigured.)
func testRedisCheckMisconfigured(t *testing.T, drv Driver) {
	ctx := context.Background()
	p := core.Policy{Name: "mis", Rules: []core.Rule{{Limit: 1, Window: time.Minute}}}
	for _, tc := range []struct {
		name  string
		args  []string
		conf  Conf                                      // the client's, but Addrs
		setup func(t *testing.T, srv *redistest.Server) // before the client exists
		after func(t *testing.T, srv *redistest.Server) // once the client is connected
		// lazy: the server refuses the client's connections from the
		// start, which only a client that connects on first use can be
		// built on (Driver.LazyDial).
		lazy bool
		want string // in the error
	}{
		{name: "no password", setup: requirePass, lazy: true, want: "NOAUTH"},
		{name: "wrong password", setup: requirePass, conf: Conf{Password: "guess"}, lazy: true, want: "WRONGPASS"},
		{name: "database out of range", conf: Conf{DB: 99}, lazy: true, want: "DB index"},
		{name: "ACL without scripting",
			setup: func(t *testing.T, srv *redistest.Server) {
				srv.Do(t, "ACL", "SETUSER", "limited", "on", ">pw", "~*", "&*", "+@all", "-@scripting")
			},
			conf: Conf{Username: "limited", Password: "pw"},
			want: "NOPERM"},
		{name: "ACL without the channel",
			setup: func(t *testing.T, srv *redistest.Server) {
				srv.Do(t, "ACL", "SETUSER", "nopub", "on", ">pw", "~*", "resetchannels", "+@all")
			},
			conf: Conf{Username: "nopub", Password: "pw"},
			want: "PUBLISH"},
		{name: "no Lua", args: []string{"--rename-command", "EVAL", "", "--rename-command", "EVALSHA", "", "--rename-command", "FCALL", ""},
			want: "unknown command"},
		{name: "fleet key of another type",
			setup: func(t *testing.T, srv *redistest.Server) { srv.Do(t, "SET", "ratekit:mis:fleet", "not a sorted set") },
			want:  "holds a string"},
		// The default user takes any password until one is set.
		{name: "password changed", conf: Conf{Password: "guess"}, after: requirePassKill, want: "WRONGPASS"},
		{name: "password required", after: requirePassKill, want: "NOAUTH"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.lazy && !drv.LazyDial {
				t.Skipf("%s connects when it is built: a server that refuses it fails the client, not Check (see \"password changed\")", drv.Name)
			}
			srv := redistest.Start(t, redistest.WithArgs(tc.args...))
			if tc.setup != nil {
				tc.setup(t, srv)
			}
			store := drv.Open(t, on(srv, tc.conf))
			l := testkit.Limiter(t, store, p)
			if tc.after != nil {
				tc.after(t, srv)
			}
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			err := l.Check(cctx)
			// A connection killed by after answers EOF first: the server
			// does not answer yet; the next one is refused.
			for tc.after != nil && err != nil && !errors.Is(err, core.ErrMisconfigured) && cctx.Err() == nil {
				time.Sleep(10 * time.Millisecond)
				err = l.Check(cctx)
			}
			if !errors.Is(err, core.ErrMisconfigured) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Check() = %v, want ErrMisconfigured naming %q", err, tc.want)
			}
			if errors.Is(err, redislib.ErrUnsafeEviction) || !strings.HasPrefix(err.Error(), drv.ErrPrefix) {
				t.Errorf("Check() = %v, wraps ErrUnsafeEviction too, or lacks the prefix %q", err, drv.ErrPrefix)
			}
			t.Logf("Check() = %v", err)
		})
	}
	t.Run("down", func(t *testing.T) {
		srv := redistest.Start(t)
		store := drv.New(t, srv)
		srv.Stop()
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		err := store.Check(cctx)
		if err == nil || errors.Is(err, core.ErrMisconfigured) || errors.Is(err, redislib.ErrUnsafeEviction) {
			t.Fatalf("Check() on a stopped Redis = %v, want an error that is neither misconfigured nor unsafe", err)
		}
	})
	t.Run("evicting", func(t *testing.T) {
		srv := redistest.Start(t, redistest.WithArgs("--maxmemory-policy", "allkeys-lru"))
		store := drv.New(t, srv)
		err := store.Check(ctx)
		if !errors.Is(err, redislib.ErrUnsafeEviction) || errors.Is(err, core.ErrMisconfigured) ||
			!strings.Contains(err.Error(), "allkeys-lru") || !strings.HasPrefix(err.Error(), drv.ErrPrefix) {
			t.Fatalf("Check() on allkeys-lru = %v, want ErrUnsafeEviction naming the policy", err)
		}
	})
	t.Run("ok", func(t *testing.T) {
		srv := redistest.Start(t)
		store := drv.New(t, srv)
		testkit.Limiter(t, store, p)
		if err := store.Check(ctx); err != nil {
			t.Fatalf("Check() on a Redis that fits = %v, want nil", err)
		}
	})
	t.Run("ACL without FUNCTION", func(t *testing.T) {
		// Scripts allowed, FUNCTION LOAD not: decisions run as scripts,
		// so Check passes, and the limits hold.
		srv := redistest.Start(t)
		srv.Do(t, "ACL", "SETUSER", "scripts", "on", ">pw", "~*", "&*", "+@all", "-function")
		store := drv.Open(t, on(srv, Conf{Username: "scripts", Password: "pw"}))
		l := testkit.Limiter(t, store, core.Policy{Name: "acl", Rules: []core.Rule{{Limit: 5, Window: time.Minute}}}, core.WithTimeout(5*time.Second))
		if err := l.Check(ctx); err != nil {
			t.Fatalf("Check() with scripts allowed and FUNCTION not = %v, want nil", err)
		}
		for i := range 6 {
			if d, err := l.Allow(ctx, "k"); err != nil || d.Source != core.SourceStore || d.Allowed != (i < 5) {
				t.Errorf("Allow #%d = %+v, %v; want decided by the store, admitted for the first 5", i+1, d, err)
			}
		}
		fl := testkit.Limiter(t, store, core.Policy{Name: "acl-leases", InFlight: 2}, core.WithTimeout(5*time.Second))
		for i := range 3 {
			if d, err := fl.Allow(ctx, "k"); err != nil || d.Source != core.SourceStore || d.Allowed != (i < 2) {
				t.Errorf("leases: Allow #%d = %+v, %v; want decided by the store, admitted for the first 2", i+1, d, err)
			}
		}
	})
}

// requirePass makes srv ask its new connections for a password.
func requirePass(t *testing.T, srv *redistest.Server) {
	srv.Do(t, "CONFIG", "SET", "requirepass", "s3cret")
}

// requirePassKill makes srv ask for a password, and closes the
// connections of its clients (but the one that asked): they must log in
// again.
func requirePassKill(t *testing.T, srv *redistest.Server) {
	requirePass(t, srv)
	srv.Do(t, "CLIENT", "KILL", "USER", "default", "SKIPME", "yes")
}
