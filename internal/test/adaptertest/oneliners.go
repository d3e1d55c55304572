package adaptertest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/redisstore"
)

// OneLiners are an adapter's LimitBy functions, the one-line middleware
// of the common cases, with the signatures every adapter gives them; M is
// the adapter's middleware type. An adapter's test lists its functions in
// one, so that an adapter that lacks one, or gives it another signature,
// does not compile.
type OneLiners[M any] struct {
	LimitByIP     func(limit int64, per time.Duration, opts ...guard.Option) M
	LimitByAppKey func(limit int64, per time.Duration, opts ...guard.Option) M
	LimitByUser   func(user any, limit int64, per time.Duration, opts ...guard.Option) M
	UseStore      func(s core.Store)
}

// UserKey is the key under which the authentication of a [Serve] server
// stores the user: gin and echo c.Set, fiber c.Locals, the request
// context for net/http and gRPC.
const UserKey = "user"

// UserHeader is the header (gRPC: metadata) from which the authentication
// of a [Serve] server takes the user ID; a request without it is
// anonymous.
const UserHeader = "X-User"

// Serve starts a server for m: an authentication middleware that stores
// the [UserHeader] value under [UserKey], then m, then a handler that
// answers 200 (gRPC: the test service's EmptyCall). It returns how to call
// it, and stops it in t.Cleanup.
type Serve[M any] func(t *testing.T, m M) Call

// Call sends one request, or gRPC call, from 127.0.0.1 with the headers
// (gRPC: metadata) and returns the status and the response header fields.
// gRPC maps its status code to the HTTP status of the same answer (OK 200,
// ResourceExhausted 429, InvalidArgument 400, Unavailable 503) and returns
// the header metadata as fields.
type Call func(t *testing.T, header http.Header) (status int, fields http.Header)

// RunOneLiners checks that an adapter's LimitBy functions exist (fs lists
// them) and work alike: each keys by what it says, is a limit of its own
// on every store (the process's memory, a store guard.WithStore gives, a
// Redis store fs.UseStore gives them all, in two instances of an app that
// count together), one-liners named alike share, they take guard options,
// and panic at construction, naming the field, on an invalid rate.
func RunOneLiners[M any](t *testing.T, fs OneLiners[M], serve Serve[M]) {
	t.Helper()
	type step struct {
		header http.Header
		want   int
	}
	ip, app, user := http.Header{}, func(k string) http.Header { return hdr("X-API-Key", k) }, func(u string) http.Header { return hdr(UserHeader, u) }
	for _, tc := range []struct {
		name  string
		m     func() M
		steps []step
	}{
		{"ip", func() M { return fs.LimitByIP(2, time.Hour) },
			[]step{{ip, 200}, {ip, 200}, {ip, 429}, {app("a"), 429}}},
		{"appkey", func() M { return fs.LimitByAppKey(1, time.Hour) },
			[]step{{app("a"), 200}, {app("a"), 429}, {app("b"), 200}, {ip, 200}, {ip, 200}}},
		{"user", func() M { return fs.LimitByUser(UserKey, 1, time.Hour) },
			[]step{{user("ada"), 200}, {user("ada"), 429}, {user("bob"), 200}, {ip, 200}, {ip, 200}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			call := serve(t, tc.m())
			for i, s := range tc.steps {
				status, fields := call(t, s.header)
				if status != s.want {
					t.Fatalf("request %d (%v): status %d, want %d", i+1, s.header, status, s.want)
				}
				switch {
				case status == 429 && (fields.Get("Retry-After") != "3600" || fields.Get("X-Ratelimit-Remaining") != "0"):
					t.Errorf("request %d: denial with Retry-After %q, X-Ratelimit-Remaining %q; want 3600 and 0",
						i+1, fields.Get("Retry-After"), fields.Get("X-Ratelimit-Remaining"))
				case i == 0 && fields.Get("X-Ratelimit-Limit") == "":
					t.Errorf("request 1: no X-Ratelimit-Limit field: %v", fields)
				}
			}
		})
	}

	// Each one-liner is a limit of its own, on any store: two routes with
	// the same rate do not share a budget unless guard.WithName names them
	// alike.
	for _, st := range []struct {
		name  string
		store func(t *testing.T) core.Store
	}{
		{"memory", func(*testing.T) core.Store { return core.NewMemoryStore() }},
		{"redis", RedisStore},
		{"default", func(*testing.T) core.Store { return nil }},
	} {
		t.Run("store/"+st.name, func(t *testing.T) {
			t.Parallel()
			var opts []guard.Option
			if s := st.store(t); s != nil {
				opts = append(opts, guard.WithStore(s))
			}
			a := serve(t, fs.LimitByIP(3, time.Hour, opts...)) // on /a
			b := serve(t, fs.LimitByIP(3, time.Hour, opts...)) // on /b
			// A name of its own: the default store is the process's.
			named := append([]guard.Option{guard.WithName(fmt.Sprintf("adaptertest-shared-%d", sharedNames.Add(1)))}, opts...)
			shared1, shared2 := serve(t, fs.LimitByIP(1, time.Hour, named...)), serve(t, fs.LimitByIP(1, time.Hour, named...))
			var got []int
			for _, call := range []Call{a, a, a, b, b, b, a, shared1, shared2} {
				status, _ := call(t, http.Header{})
				got = append(got, status)
			}
			if want := "[200 200 200 200 200 200 429 200 429]"; fmt.Sprint(got) != want {
				t.Errorf("a×3, b×3, a, then two named alike: statuses %v, want %s", got, want)
			}
		})
	}

	// UseStore moves every one-liner to one store in one line. It sets
	// the process's default store once, so each instance of the app is a
	// process of its own: this test binary, run again for this subtest.
	t.Run("usestore", func(t *testing.T) {
		if addr := os.Getenv(useStoreEnv); addr != "" {
			useStoreInstance(t, fs, serve, addr, os.Getenv(instanceEnv))
			return
		}
		if testing.Short() {
			t.Skip("starts a redis-server and the test binary")
		}
		t.Parallel()
		srv := redistest.Start(t)
		var run []string
		for _, part := range strings.Split(t.Name(), "/") {
			run = append(run, "^"+regexp.QuoteMeta(part)+"$")
		}
		for _, instance := range []string{"1", "2"} {
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run="+strings.Join(run, "/"), "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), useStoreEnv+"="+srv.Addr(), instanceEnv+"="+instance)
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
				t.Errorf("instance %s: %v\n%s", instance, err, out)
			}
		}
	})

	t.Run("options", func(t *testing.T) {
		t.Parallel()
		call := serve(t, fs.LimitByAppKey(5, time.Minute, guard.WithHeaders(guard.HeadersIETF), guard.WithName("api-keys")))
		status, fields := call(t, app("k"))
		if status != 200 || !strings.HasPrefix(fields.Get("RateLimit-Policy"), `"api-keys";q=5;w=60`) || fields.Get("X-Ratelimit-Limit") != "" {
			t.Errorf("status %d, RateLimit-Policy %q, X-Ratelimit-Limit %q; want 200, \"api-keys\";q=5;w=60…, none",
				status, fields.Get("RateLimit-Policy"), fields.Get("X-Ratelimit-Limit"))
		}
	})

	t.Run("panics", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			f    func()
			want string
		}{
			{func() { fs.LimitByIP(0, time.Minute) }, "LimitByIP: limit is 0"},
			{func() { fs.LimitByAppKey(10, 0) }, "LimitByAppKey: per is 0s"},
			{func() { fs.LimitByUser(nil, 10, time.Minute) }, "LimitByUser: user key is nil"},
			{func() { fs.LimitByUser(UserKey, -1, time.Minute) }, "LimitByUser: limit is -1"},
			{func() { fs.LimitByIP(10, time.Minute, guard.WithStore(nil)) }, "WithStore: store is nil"},
			{func() { fs.LimitByIP(10, time.Minute, guard.WithName("a b")) }, `policy Name "a b"`},
		} {
			func() {
				defer func() {
					if p := recover(); p == nil || !strings.Contains(fmt.Sprint(p), tc.want) {
						t.Errorf("panic %v, want one containing %q", p, tc.want)
					}
				}()
				tc.f()
			}()
		}
	})
}

// HTTPCall returns the Call of an HTTP server at base ("http://host:port")
// that serves [Path]: a GET with the given headers. Its idle connections
// close before the server stops (register the server's cleanup first).
func HTTPCall(t *testing.T, base string) Call {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	return func(t *testing.T, h http.Header) (int, http.Header) {
		t.Helper()
		res, err := try(server{url: base, client: client}, request{header: h})
		if err != nil {
			t.Fatal(err)
		}
		return res.status, res.header
	}
}

// The environment of a test binary run as an instance of an app by the
// usestore case of RunOneLiners: the address of its Redis, and which
// instance it is.
const (
	useStoreEnv = "RATEKIT_ADAPTERTEST_USESTORE_REDIS"
	instanceEnv = "RATEKIT_ADAPTERTEST_INSTANCE"
)

// useStoreInstance is instance 1 or 2 of an app whose two routes, /a and
// /b, have one-liners of the same rate, moved to the Redis at addr with
// fs.UseStore: instance 1 gets 3 requests through on each route, and
// instance 2 none, since they count together on Redis.
func useStoreInstance[M any](t *testing.T, fs OneLiners[M], serve Serve[M], addr, instance string) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	fs.UseStore(warm(t, redisstore.New(rdb)))
	a := serve(t, fs.LimitByIP(3, time.Minute))
	b := serve(t, fs.LimitByIP(3, time.Minute))
	calls, want := []Call{a, a, a, b, b, b}, "[200 200 200 200 200 200]"
	if instance == "2" {
		calls, want = []Call{a, b}, "[429 429]"
	}
	var got []int
	for _, call := range calls {
		status, _ := call(t, http.Header{})
		got = append(got, status)
	}
	if fmt.Sprint(got) != want {
		t.Errorf("instance %s: statuses %v, want %s", instance, got, want)
	}
}

// sharedNames numbers the names of the one-liners named alike.
var sharedNames atomic.Int64

// RedisStore returns a Redis store on a redis-server of the test's own,
// warmed up. Under -short it skips the test.
func RedisStore(t *testing.T) core.Store {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a redis-server")
	}
	return warm(t, redisstore.New(redistest.Start(t).Client(t)))
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
