package guard_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/redisstore"
)

// userKey is where the tests' authentication puts the user ID.
type userKey struct{}

// httpReq is a request view from peer, with the headers kv and, when
// user is not "", the user ID in its context under userKey{}.
func httpReq(peer, user string, kv ...string) keyfunc.Request {
	r := httptest.NewRequest("GET", "/r", nil)
	r.RemoteAddr = peer
	for i := 0; i+1 < len(kv); i += 2 {
		r.Header.Set(kv[i], kv[i+1])
	}
	if user != "" {
		r = r.WithContext(context.WithValue(r.Context(), userKey{}, user))
	}
	return keyfunc.FromHTTP(r, "/r")
}

// outcomes admits each request in turn and returns their outcomes.
func outcomes(g *guard.Guard, rs ...keyfunc.Request) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = g.Admit(context.Background(), r).Outcome.String()
	}
	return out
}

func TestLimitByKinds(t *testing.T) {
	t.Parallel()
	ip := func(peer string) keyfunc.Request { return httpReq(peer, "") }
	app := func(key string) keyfunc.Request {
		if key == "" {
			return httpReq("192.0.2.1:1", "")
		}
		return httpReq("192.0.2.1:1", "", "X-API-Key", key)
	}
	usr := func(id string) keyfunc.Request { return httpReq("192.0.2.1:1", id) }
	for _, tc := range []struct {
		name string
		g    *guard.Guard
		rs   []keyfunc.Request
		want string
	}{
		{"ip", guard.LimitByIP(2, time.Hour),
			[]keyfunc.Request{ip("192.0.2.1:1"), ip("192.0.2.1:2"), ip("192.0.2.1:3"), ip("192.0.2.2:1")},
			"allow allow deny allow"},
		{"appkey", guard.LimitByAppKey(2, time.Hour),
			[]keyfunc.Request{app("a"), app("a"), app("a"), app("b"), app("")},
			"allow allow deny allow skip"},
		{"user", guard.LimitByUser(userKey{}, 2, time.Hour),
			[]keyfunc.Request{usr("ada"), usr("ada"), usr("ada"), usr("bob"), usr("")},
			"allow allow deny allow skip"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := strings.Join(outcomes(tc.g, tc.rs...), " "); got != tc.want {
				t.Errorf("outcomes = %s, want %s", got, tc.want)
			}
		})
	}

	t.Run("retry after", func(t *testing.T) {
		g := guard.LimitByIP(1, time.Hour)
		g.Admit(context.Background(), ip("192.0.2.1:1"))
		v := g.Admit(context.Background(), ip("192.0.2.1:1"))
		if v.Outcome != guard.OutcomeDeny || guard.Seconds(v.Decision.RetryAfter) != 3600 || v.Decision.Limit != 1 {
			t.Errorf("second request: %v, RetryAfter %v, Limit %d; want deny after 1h, limit 1", v.Outcome, v.Decision.RetryAfter, v.Decision.Limit)
		}
	})

	t.Run("options apply", func(t *testing.T) {
		// WithKey replaces the default key: here the header X-Tenant.
		g := guard.LimitByIP(1, time.Hour, guard.WithKey(keyfunc.Header("X-Tenant")))
		got := outcomes(g, httpReq("192.0.2.1:1", "", "X-Tenant", "t1"), httpReq("192.0.2.2:1", "", "X-Tenant", "t1"),
			httpReq("192.0.2.1:1", "", "X-Tenant", "t2"))
		if want := "allow deny allow"; strings.Join(got, " ") != want {
			t.Errorf("outcomes = %v, want %s", got, want)
		}
	})
}

// The default names are the rate, with an ordinal from the second
// one-liner of a rate on. Not parallel: it starts the ordinals afresh.
func TestLimitByPolicy(t *testing.T) {
	guard.ForgetOneLiners()
	for _, tc := range []struct {
		g         *guard.Guard
		name      string
		algorithm core.Algorithm
	}{
		{guard.LimitByIP(100, time.Minute), "ip-100-per-1m", core.SlidingLog},
		{guard.LimitByAppKey(1000, time.Hour), "appkey-1000-per-1h", core.SlidingLog},
		{guard.LimitByAppKey(100_000, 24*time.Hour), "appkey-100000-per-24h", core.SlidingBuckets},
		{guard.LimitByUser(userKey{}, 1001, 90*time.Second), "user-1001-per-1m30s", core.SlidingBuckets},
		{guard.LimitByIP(5, 500*time.Millisecond), "ip-5-per-500ms", core.SlidingLog},
		{guard.LimitByIP(5, 10*time.Second, guard.WithName("hello")), "hello", core.SlidingLog},
		{guard.LimitByIP(100, time.Minute), "ip-100-per-1m-2", core.SlidingLog},
		{guard.LimitByIP(100, time.Minute, guard.WithName("ip-100-per-1m")), "ip-100-per-1m", core.SlidingLog},
		{guard.LimitByIP(100, time.Minute, guard.WithStore(core.NewMemoryStore())), "ip-100-per-1m-3", core.SlidingLog},
		{guard.LimitByAppKey(100, time.Minute), "appkey-100-per-1m", core.SlidingLog},
	} {
		p := tc.g.Limiter().Policy()
		if p.Name != tc.name || p.Algorithm != tc.algorithm || len(p.Rules) != 1 {
			t.Errorf("policy %+v, want name %q, algorithm %v, one rule", p, tc.name, tc.algorithm)
		}
	}
}

// Invalid configuration is a panic at construction that names the field.
func TestLimitByPanics(t *testing.T) {
	t.Parallel()
	l := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "p", Rules: []core.Rule{{Limit: 1, Window: time.Second}}})
	for _, tc := range []struct {
		name string
		f    func()
		want string
	}{
		{"limit", func() { guard.LimitByIP(0, time.Minute) }, "LimitByIP: limit is 0, must be at least 1"},
		{"per", func() { guard.LimitByAppKey(1, 0) }, "LimitByAppKey: per is 0s, must be at least 1ms"},
		{"per negative", func() { guard.LimitByIP(1, -time.Second) }, "per is -1s"},
		{"per fraction", func() { guard.LimitByIP(1, time.Millisecond+time.Nanosecond) }, "per is 1.000001ms, must be a whole number of microseconds"},
		{"store", func() { guard.LimitByIP(1, time.Minute, guard.WithStore(nil)) }, "LimitByIP: WithStore: store is nil"},
		{"name", func() { guard.LimitByIP(1, time.Minute, guard.WithName("my limit")) }, `LimitByIP: policy Name "my limit" must be`},
		{"long name", func() { guard.LimitByIP(1, time.Minute, guard.WithName(strings.Repeat("n", 65))) }, "longer than 64 bytes"},
		{"user key", func() { guard.LimitByUser(nil, 1, time.Minute) }, "LimitByUser: user key is nil"},
		{"store on New", func() { guard.New(l, guard.WithStore(core.NewMemoryStore())) }, "ratekit: guard.New: WithStore and WithName"},
		{"name on New", func() { guard.New(l, guard.WithName("x")) }, "ratekit: guard.New: WithStore and WithName"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				p := recover()
				if p == nil || !strings.Contains(fmt.Sprint(p), tc.want) {
					t.Errorf("panic %v, want one containing %q", p, tc.want)
				}
			}()
			tc.f()
		})
	}
}

// stores are the stores the one-liner tests run on: a memory store, and
// a Redis store on a redis-server of the test's own.
var stores = []struct {
	name string
	new  func(t *testing.T) core.Store
}{
	{"memory", func(*testing.T) core.Store { return core.NewMemoryStore() }},
	{"redis", func(t *testing.T) core.Store {
		if testing.Short() {
			t.Skip("starts a redis-server")
		}
		return warm(t, redisstore.New(redistest.Start(t).Client(t)))
	}},
}

// warm returns s once it has decided once: a connection is open and the
// library loaded, with time to spare (on a busy machine the first call
// may take more than the 20 ms timeout and be decided locally, as it
// should).
func warm(t *testing.T, s core.Store) core.Store {
	t.Helper()
	l, err := core.NewLimiter(s, core.Policy{Name: "warm-up", Rules: []core.Rule{{Limit: 1, Window: time.Second}}},
		core.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if d, err := l.Allow(context.Background(), "warm-up"); err != nil || d.Source != core.SourceStore {
		t.Fatalf("warming the store: Allow = %+v, %v; want a decision of the store", d, err)
	}
	return s
}

// Each one-liner is a limit of its own on any store, the default one
// included: two routes with the same rate do not share a budget unless
// WithName names them alike.
func TestLimitByStore(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			s := st.new(t)
			r := httpReq("192.0.2.1:1", "")
			got := storeDecides(t, func(obs guard.Option) string {
				a := guard.LimitByIP(3, time.Hour, guard.WithStore(s), obs) // on /a
				b := guard.LimitByIP(3, time.Hour, guard.WithStore(s), obs) // on /b
				return outcomes3(a, r) + " | " + outcomes3(b, r) + " | " + outcomes3(a, r)
			})
			if want := "allow allow allow | allow allow allow | deny deny deny"; got != want {
				t.Errorf("a, b, a: %s, want %s", got, want)
			}
			got = storeDecides(t, func(obs guard.Option) string {
				name := fmt.Sprintf("signup-%d", time.Now().UnixNano())
				shared1 := guard.LimitByIP(1, time.Hour, guard.WithStore(s), guard.WithName(name), obs)
				shared2 := guard.LimitByIP(1, time.Hour, guard.WithStore(s), guard.WithName(name), obs)
				return strings.Join(append(outcomes(shared1, r), outcomes(shared2, r)...), " ")
			})
			if got != "allow deny" {
				t.Errorf("two one-liners named alike: %s, want allow deny", got)
			}
		})
	}
}

// storeDecides returns what run returns once every decision of the
// one-liners it builds (each with the option it is given) came from the
// store: a one-liner's timeout is 20 ms, which a loaded machine may miss,
// and then its failure policy decides, which says nothing of the store.
// It runs afresh, on new limits, up to five times.
func storeDecides(t *testing.T, run func(obs guard.Option) string) string {
	t.Helper()
	for attempt := 1; ; attempt++ {
		events := &testkit.Events{}
		got := run(guard.WithObserver(events))
		n := events.Count(core.EventStoreError)
		if n == 0 {
			return got
		}
		if attempt == 5 {
			t.Fatalf("%d attempts, each with store calls that failed (last: %d, %v)", attempt, n, events.Of(core.EventStoreError)[0].Err)
		}
		t.Logf("attempt %d: %d store calls failed (%v): again, on new limits", attempt, n, events.Of(core.EventStoreError)[0].Err)
	}
}

func outcomes3(g *guard.Guard, r keyfunc.Request) string {
	return strings.Join(outcomes(g, r, r, r), " ")
}

// Two instances of one app on one Redis build the same one-liners in the
// same order: each one-liner counts together with its twin in the other
// instance, and apart from the other one-liner of the same rate; whether
// the store is given to each (WithStore) or to all at once (UseStore).
// Not parallel: it starts the one-liners afresh, as a new process does.
func TestLimitByInstances(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a redis-server")
	}
	defer guard.ForgetOneLiners()
	for _, how := range []string{"WithStore", "UseStore"} {
		t.Run(how, func(t *testing.T) {
			srv := redistest.Start(t)
			app := func(obs guard.Option) (a, b *guard.Guard) {
				guard.ForgetOneLiners() // a new process
				s := warm(t, redisstore.New(srv.Client(t)))
				opts := []guard.Option{obs}
				if how == "UseStore" {
					guard.UseStore(s)
				} else {
					opts = append(opts, guard.WithStore(s))
				}
				return guard.LimitByIP(3, time.Minute, opts...), guard.LimitByIP(3, time.Minute, opts...)
			}
			r := httpReq("192.0.2.1:1", "")
			got := storeDecides(t, func(obs guard.Option) string {
				srv.Do(t, "FLUSHALL") // the same names again: afresh
				a1, b1 := app(obs)
				a2, b2 := app(obs)
				if a1.Limiter().Policy().Name != a2.Limiter().Policy().Name || b1.Limiter().Policy().Name != b2.Limiter().Policy().Name {
					t.Fatalf("names %q, %q in one instance and %q, %q in the other, want the same", a1.Limiter().Policy().Name,
						b1.Limiter().Policy().Name, a2.Limiter().Policy().Name, b2.Limiter().Policy().Name)
				}
				return strings.Join([]string{
					strings.Join(outcomes(a1, r, r), " "), strings.Join(outcomes(a2, r, r), " "),
					strings.Join(outcomes(b2, r, r), " "), strings.Join(outcomes(b1, r, r), " "),
				}, " | ")
			})
			if want := "allow allow | allow deny | allow allow | allow deny"; got != want {
				t.Errorf("instance 1 on /a, 2 on /a, 2 on /b, 1 on /b: %s, want %s", got, want)
			}
		})
	}
}

// UseStore sets the store of the one-liners built after it without
// WithStore, once, before any was built on memory; misuse panics. Not
// parallel: it sets the process's default store.
func TestUseStore(t *testing.T) {
	defer guard.ForgetOneLiners()
	r := httpReq("192.0.2.1:1", "")

	guard.ForgetOneLiners()
	own := core.NewMemoryStore()
	before := guard.LimitByIP(1, time.Hour, guard.WithStore(own)) // has its store: no misuse
	s := core.NewMemoryStore()
	guard.UseStore(s)
	g := guard.LimitByIP(1, time.Hour)
	outcomes(g, r)
	// The unit is in s: a limiter of the same policy on s sees it.
	d, err := testkit.Limiter(t, s, g.Limiter().Policy()).Peek(context.Background(), "192.0.2.1")
	if err != nil || d.Allowed {
		t.Errorf("Peek on the store of UseStore = %+v, %v; want the one-liner's unit there (denied)", d, err)
	}
	if got := outcomes(before, r); got[0] != "allow" {
		t.Errorf("a one-liner built with WithStore before UseStore: %v, want allow (its own store)", got)
	}

	for _, tc := range []struct {
		name  string
		setup func()
		want  string
	}{
		{"nil", func() {}, "ratekit: UseStore: store is nil"},
		{"twice", func() { guard.UseStore(core.NewMemoryStore()) }, "ratekit: UseStore: called a second time"},
		{"after one-liners", func() { guard.LimitByAppKey(7, time.Minute); guard.LimitByIP(7, time.Minute) },
			`ratekit: UseStore: called after 2 one-liners were built without WithStore (the first: policy "appkey-7-per-1m")`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			guard.ForgetOneLiners()
			tc.setup()
			defer func() {
				if p := recover(); p == nil || !strings.HasPrefix(fmt.Sprint(p), tc.want) {
					t.Errorf("panic %v, want one starting %q", p, tc.want)
				}
			}()
			var store core.Store = core.NewMemoryStore()
			if tc.name == "nil" {
				store = nil
			}
			guard.UseStore(store)
		})
	}
}

// WithObserver observes the limiter a LimitBy function builds too: its
// decisions, next to the guard's own events.
func TestLimitByObserver(t *testing.T) {
	t.Parallel()
	var (
		mu    sync.Mutex
		kinds []core.EventKind
	)
	obs := core.ObserverFunc(func(_ context.Context, e core.Event) {
		mu.Lock()
		kinds = append(kinds, e.Kind)
		mu.Unlock()
	})
	g := guard.LimitByAppKey(1, time.Hour, guard.WithObserver(obs))
	outcomes(g, httpReq("192.0.2.1:1", "", "X-API-Key", "k"), httpReq("192.0.2.1:1", ""))
	mu.Lock()
	defer mu.Unlock()
	if want := []core.EventKind{core.EventDecision, guard.EventSkip}; !slices.Equal(kinds, want) {
		t.Errorf("events %v, want %v", kinds, want)
	}
}

// A limit whose key function finds no key (a per-user key before the
// authentication middleware) logs one warning at the first request
// without one, not one per request; one that has found a key before never
// does. Not parallel: it replaces slog's default logger.
func TestLimitByUserBeforeAuthWarnsOnce(t *testing.T) {
	var buf bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	defer slog.SetDefault(prev)
	const warning = "the first request to this limit had no key"

	anon := httpReq("192.0.2.1:1", "")
	g := guard.LimitByUser(userKey{}, 10, time.Minute, guard.WithName("user-before-auth"))
	outcomes(g, anon)
	if n := strings.Count(buf.String(), warning); n != 1 || !strings.Contains(buf.String(), "policy=user-before-auth") {
		t.Fatalf("after 1 request without a user: %d warnings, want 1 naming the policy:\n%s", n, buf.String())
	}
	outcomes(g, repeat(anon, 250)...)
	outcomes(g, httpReq("192.0.2.1:1", "ada"), anon)
	if n := strings.Count(buf.String(), warning); n != 1 {
		t.Fatalf("after 253 requests: %d warnings, want 1:\n%s", n, buf.String())
	}

	buf.Reset()
	seen := guard.LimitByUser(userKey{}, 10, time.Minute)
	outcomes(seen, httpReq("192.0.2.1:1", "ada"))
	outcomes(seen, repeat(anon, 200)...)
	if buf.Len() != 0 {
		t.Errorf("a limit that found a user warned:\n%s", buf.String())
	}

	// NoKeyReject answers keyless requests itself: nothing silent to warn of.
	rejecting := guard.LimitByUser(userKey{}, 10, time.Minute, guard.WithNoKey(guard.NoKeyReject))
	outcomes(rejecting, repeat(anon, 200)...)
	if buf.Len() != 0 {
		t.Errorf("a limit under NoKeyReject warned:\n%s", buf.String())
	}
}

func repeat(r keyfunc.Request, n int) []keyfunc.Request {
	rs := make([]keyfunc.Request, n)
	for i := range rs {
		rs[i] = r
	}
	return rs
}
