package guard

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfunc"
)

// The LimitBy functions are the common cases in one call: a rate (limit
// requests per window) for each client IP, API key or user, on a limiter
// they build. Every adapter offers them under the same names, returning
// its framework's middleware, so that one import and one line limit a
// route:
//
//	r.Use(ginlimit.LimitByIP(100, time.Minute))
//
// Anything else (several rules, lockouts, tiers, calendar quotas, a
// failure policy of your choice) is a core.Policy given to core.NewLimiter,
// and the limiter given to New.

// bucketsAbove is the largest limit the LimitBy functions keep exactly,
// one entry per unit (core.SlidingLog); above it they count in buckets
// (core.SlidingBuckets), whose memory per key does not grow with the
// limit.
const bucketsAbove = 1000

// WithStore sets the store of the limiter that a LimitBy function builds
// ([LimitByIP], [LimitByAppKey], [LimitByUser] and the adapters' functions
// of the same names). By default they all count on one process-wide
// core.MemoryStore, which counts in this process only. Give every
// instance of the app the same Redis store (redisstore.New(rdb)) to count
// together. Each LimitBy function builds a limit of its own, whatever the
// store: its policy name ([WithName]) tells it apart from every other
// one-liner of the process, and names it alike in every instance of the
// app, so that on a shared store an instance counts each one-liner
// together with the same one-liner of the other instances, and with no
// other. Give two one-liners one name with [WithName] to make them share
// each client's budget.
//
// [New] panics on this option: a *core.Limiter has its store already. A
// LimitBy function panics on a nil store.
func WithStore(s core.Store) Option {
	return func(c *config) {
		c.rateSet = true
		c.store = s
		if s == nil {
			c.store = nilStore{}
		}
	}
}

// nilStore marks WithStore(nil), refused when the limiter is built.
type nilStore struct{ core.Store }

// WithName sets the policy name (core.Policy.Name) of the limiter that a
// LimitBy function builds: its key namespace in the store, its metrics
// label and its name in the IETF header fields and problem bodies.
// One-liners with the same name on one store count together: name two
// routes alike to give them one budget per client, on the memory store as
// on Redis. A name must be visible ASCII without braces, spaces, quotes or
// backslashes, at most 64 bytes; a LimitBy function panics on another.
//
// By default the name is the rate, "<by>-<limit>-per-<window>" ("ip-100-per-1m",
// "appkey-1000-per-1h", "user-50-per-1m"), with "-2", "-3", … appended for
// the second, third, … one-liner of the same rate built in this process:
// LimitByIP(3, time.Minute) on /a is "ip-3-per-1m" and on /b
// "ip-3-per-1m-2", two limits. An app builds its middleware in the same
// order in every instance, so each one-liner gets the same name in every
// instance and counts together with its twins on a shared store, as it
// should. The ordinal rather than, say, the file and line of the call
// keeps names stable across releases that move code around: a one-liner
// whose rate no other one-liner has keeps its bare name in every release
// (and in releases before ordinals), so a rolling deploy shares its counts
// from old to new instances. What renames: adding, removing or reordering
// one-liners of one rate shifts the ordinals of those built after the
// change, and during a rolling deploy old and new instances then count
// those routes under different names, each route getting up to its limit
// from either side for at most one window. Name such one-liners with
// WithName, and any built in an order that may differ between instances
// (in goroutines, or from a map).
//
// [New] panics on this option: a *core.Limiter has its policy already.
func WithName(name string) Option {
	return func(c *config) {
		c.rateSet = true
		c.name = name
	}
}

// LimitByIP returns a guard that admits limit requests per window of
// length per for each client IP address: keyfunc.ClientIP(), the TCP
// peer's address (an IPv6 client by its /64). Behind a reverse proxy that
// puts every client in one bucket: pass
// WithKey(keyfunc.ClientIP(keyfunc.TrustedProxies("10.0.0.0/8"))) to read
// the address your proxies forward.
//
// The limiter it builds counts on the process-wide memory store unless
// [WithStore] gives one, under a policy named as [WithName] says, with one
// rule {limit, per}, exact up to 1000 per window (core.SlidingLog) and in
// buckets above (core.SlidingBuckets). The observers of [WithObserver]
// observe the limiter too. Every other option applies as in [New].
//
// LimitByIP panics, naming the field, if limit is below 1, per is under a
// millisecond or not a whole number of microseconds, the store is nil or
// the name invalid: programmer errors caught at start-up. Limits read from
// configuration are better built with core.NewLimiter, which returns an
// error, and given to New.
func LimitByIP(limit int64, per time.Duration, opts ...Option) *Guard {
	return newRate("LimitByIP", "ip", keyfunc.ClientIP(), limit, per, opts)
}

// LimitByAppKey returns a guard that admits limit requests per window of
// length per for each API key: keyfunc.AppKey(), the X-API-Key header,
// else the api_key query parameter (gRPC: the x-api-key metadata).
// Requests without a key are not limited by it ([NoKeySkip]): put it after
// the middleware that refuses unknown keys, pair it with [LimitByIP], or
// pass WithNoKey([NoKeyReject]). It builds its limiter and panics as
// [LimitByIP] does.
func LimitByAppKey(limit int64, per time.Duration, opts ...Option) *Guard {
	return newRate("LimitByAppKey", "appkey", keyfunc.AppKey(), limit, per, opts)
}

// LimitByUser returns a guard that admits limit requests per window of
// length per for each user: keyfunc.UserIDFrom(user), the value your
// authentication middleware stored under the key user — in the request
// context (context.WithValue), with gin or echo c.Set, or fiber c.Locals.
// user is any comparable value, in every adapter alike; echo's c.Set takes
// string keys only, so with echo it is the string the middleware used.
// Put it after that middleware: before it, no request has a user yet,
// nothing is limited, and the guard logs one warning at the first request
// without one, when none came with one before. Anonymous requests are not limited by it ([NoKeySkip]): pair it with
// [LimitByIP]. It builds its limiter and panics as [LimitByIP] does, and
// also on a nil user key.
func LimitByUser(user any, limit int64, per time.Duration, opts ...Option) *Guard {
	if user == nil {
		panic("ratekit: LimitByUser: user key is nil")
	}
	return newRate("LimitByUser", "user", keyfunc.UserIDFrom(user), limit, per, opts)
}

// newRate builds the guard of a LimitBy function named fn: a limiter of
// one rule {limit, per} keyed by key, named as [WithName] says.
func newRate(fn, by string, key keyfunc.Func, limit int64, per time.Duration, opts []Option) *Guard {
	switch {
	case limit < 1:
		panic(fmt.Sprintf("ratekit: %s: limit is %d, must be at least 1", fn, limit))
	case per < time.Millisecond:
		panic(fmt.Sprintf("ratekit: %s: per is %v, must be at least 1ms", fn, per))
	case per%time.Microsecond != 0:
		panic(fmt.Sprintf("ratekit: %s: per is %v, must be a whole number of microseconds", fn, per))
	}
	cfg := newConfig(append([]Option{WithKey(key)}, opts...))
	if _, ok := cfg.store.(nilStore); ok {
		panic(fmt.Sprintf("ratekit: %s: WithStore: store is nil", fn))
	}
	p := core.Policy{Name: cfg.name, Rules: []core.Rule{{Limit: limit, Window: per}}}
	if limit > bucketsAbove {
		p.Algorithm = core.SlidingBuckets
	}
	var store core.Store
	p.Name, store = oneLiners.claim(cfg.name, by+"-"+strconv.FormatInt(limit, 10)+"-per-"+shortDuration(per), cfg.store)
	var lopts []core.Option
	if cfg.observer != nil {
		lopts = append(lopts, core.WithObserver(cfg.observer))
	}
	l, err := core.NewLimiter(store, p, lopts...)
	if err != nil {
		panic(fmt.Sprintf("ratekit: %s: %s", fn, strings.TrimPrefix(err.Error(), "ratekit: ")))
	}
	return build(l, cfg)
}

// UseStore sets the store of the LimitBy one-liners ([LimitByIP],
// [LimitByAppKey], [LimitByUser] and the adapters' functions of the same
// names) built after it without [WithStore], for the whole process: by
// default they count in this process's memory. One line at start-up, before
// the middleware is built, moves all of an app's one-liners to Redis, and
// every instance counts together:
//
//	guard.UseStore(redisstore.New(rdb))
//
// Each adapter has a UseStore that calls this one, so that the adapter's
// import is the only one a program needs besides the store's:
// ginlimit.UseStore(redisstore.New(rdb)). UseStore is safe for concurrent
// use, but meant to be called once, as slog.SetDefault is: it panics on a
// nil store, when called a second time, and when one-liners were built
// before it without WithStore — they count in this process's memory and
// would go on doing so unnoticed, each instance of the app admitting its
// own limit. A panic at start-up says so at once, where a log line could
// go unread while the limits are looser than configured. The store is
// never closed.
func UseStore(s core.Store) {
	oneLiners.use(s)
}

// oneLiners is what the LimitBy functions of a process share.
var oneLiners registry

// registry holds the LimitBy functions' shared state: the default store,
// and how many one-liners of each rate were built, for their names.
type registry struct {
	mu       sync.Mutex
	store    core.Store        // set by UseStore
	memory   *core.MemoryStore // the default store until then, made on first use
	onMemory int               // one-liners built on memory
	first    string            // the name of the first of them
	ordinal  map[string]int    // one-liners built per rate name
}

// use sets the default store to s.
func (r *registry) use(s core.Store) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case s == nil:
		panic("ratekit: UseStore: store is nil")
	case r.store != nil:
		panic("ratekit: UseStore: called a second time; it sets the store of the one-liners once, at start-up")
	case r.onMemory > 0:
		panic(fmt.Sprintf("ratekit: UseStore: called after %d one-liners were built without WithStore (the first: policy %q); "+
			"they count in this process's memory: call UseStore at start-up, before building any middleware",
			r.onMemory, r.first))
	}
	r.store = s
}

// claim returns the policy name and the store of a one-liner being
// built: name, or rate with its ordinal among the one-liners of that rate
// when name is ""; and store, or the default store when store is nil.
func (r *registry) claim(name, rate string, store core.Store) (string, core.Store) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if name == "" {
		if r.ordinal == nil {
			r.ordinal = make(map[string]int)
		}
		r.ordinal[rate]++
		name = rate
		if n := r.ordinal[rate]; n > 1 {
			name += "-" + strconv.Itoa(n)
		}
	}
	switch {
	case store != nil:
	case r.store != nil:
		store = r.store
	default:
		if r.memory == nil {
			r.memory = core.NewMemoryStore()
		}
		store = r.memory
		if r.onMemory++; r.onMemory == 1 {
			r.first = name
		}
	}
	return name, store
}

// shortDuration writes d as time.Duration.String does, without the zero
// units at its end: "1m" rather than "1m0s", "24h" rather than "24h0m0s".
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// keyWatch watches the keys a limit finds, so that a key function that
// finds none, such as a per-user key put before the authentication
// middleware (under NoKeySkip every request then goes unlimited,
// silently), is reported at once, the first time, rather than never or on
// every request.
type keyWatch struct {
	state atomic.Int32 // watchNone, watchKeyed or watchWarned
}

// The states of a keyWatch.
const (
	watchNone   int32 = iota // no request had a key, and none was missed
	watchKeyed               // a request had a key
	watchWarned              // a request had none, before any had one: said
)

// found records a request with a key. Once one has been seen, the watch
// costs one atomic load per request.
func (w *keyWatch) found() {
	if w.state.Load() != watchKeyed {
		w.state.Store(watchKeyed)
	}
}

// missed records a request without a key under NoKeySkip, and logs the
// warning when it is the first and no request had a key before.
func (w *keyWatch) missed(ctx context.Context, policy string) {
	if w.state.Load() != watchNone || !w.state.CompareAndSwap(watchNone, watchWarned) {
		return
	}
	slog.Default().WarnContext(ctx, "ratekit: the first request to this limit had no key, so it was not limited "+
		"(keyfunc.ErrNoKey, skipped under guard.NoKeySkip); if none has one, none is limited: is a per-user key "+
		"placed before the middleware that sets the user? (said once)", "policy", policy)
}
