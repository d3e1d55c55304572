// Package testkit builds what ratekit's tests share: a limiter that fails
// the test instead of returning an error ([Limiter]), a fleet of app
// instances on one shared limit on each backend ([Fleet], [Backends]), an
// observer that keeps the events it sees ([Events]) and one that counts
// them ([EventCounts]), a store that is down ([FailingStore]), a key
// function by user ([UserKey]), an app's plan table for tiers ([Plans]),
// a clock to step ([PastClock]), a poll for a condition another goroutine
// makes true ([WaitUntil]), a check for leaked goroutines
// ([VerifyNoLeaks]), and the scenarios that must hold on every store,
// each a function of the [Backend] it runs on (core's tests call it on
// the memory store, internal/test/redissuite on each Redis driver).
//
// A second store driver joins every fleet test by one more entry in
// [Backends].
package testkit

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/redisstore"
)

// Limiter returns a limiter of p on store with opts, or fails t with the
// error of core.NewLimiter.
func Limiter(t testing.TB, store core.Store, p core.Policy, opts ...core.Option) *core.Limiter {
	t.Helper()
	l, err := core.NewLimiter(store, p, opts...)
	if err != nil {
		t.Fatalf("core.NewLimiter(%q): %v", p.Name, err)
	}
	return l
}

// Policy returns the policy name of rules, all of which must hold.
func Policy(name string, rules ...core.Rule) core.Policy {
	return core.Policy{Name: name, Rules: rules}
}

// PerHour is the rule of at most limit units an hour.
func PerHour(limit int64) core.Rule { return core.Rule{Limit: limit, Window: time.Hour} }

// PerMinute is the rule of at most limit units a minute.
func PerMinute(limit int64) core.Rule { return core.Rule{Limit: limit, Window: time.Minute} }

// StoreTimeout is the store call timeout of the limiters of a fleet on a
// shared server: generous, so that a loaded machine under -race never
// makes a decision fall back to the local store, which would make the
// counts of a test meaningless.
const StoreTimeout = 2 * time.Second

// A Backend is where the instances of a [Fleet] keep their shared limit.
type Backend struct {
	// Name names the backend in subtests: "memory", "redis".
	Name string
	// stores returns the stores of n app instances on one new backend:
	// one store for every instance, or a single one when the backend
	// lives in one process and so holds a single instance.
	stores func(t testing.TB, n int) []core.Store
	// opts come before a test's own options on every limiter.
	opts []core.Option
}

// NewBackend returns a backend named name, whose stores returns the
// stores of n app instances on one new backend (one store for every
// instance, or a single one when the backend lives in one process), and
// whose opts come before a test's own options on every limiter: a
// backend of a store driver other than the ones here.
func NewBackend(name string, stores func(t testing.TB, n int) []core.Store, opts ...core.Option) Backend {
	return Backend{Name: name, stores: stores, opts: opts}
}

// Memory is one process on a MemoryStore. A process keeps one limiter
// per policy, so a fleet on Memory is that one limiter, whose callers
// wait in one line, however many instances the test asks for.
var Memory = Backend{
	Name:   "memory",
	stores: func(testing.TB, int) []core.Store { return []core.Store{core.NewMemoryStore()} },
}

// Redis is one redis-server started with redistest (the test is skipped
// with -short), and every instance a redisstore.Store on a go-redis
// client of its own, with a [StoreTimeout].
var Redis = Backend{
	Name: "redis",
	stores: func(t testing.TB, n int) []core.Store {
		srv := redistest.Start(t)
		stores := make([]core.Store, n)
		for i := range stores {
			stores[i] = redisstore.New(srv.Client(t))
		}
		return stores
	},
	opts: []core.Option{core.WithTimeout(StoreTimeout)},
}

// Backends returns every backend a fleet test runs on, in the order
// the subtests should run.
func Backends() []Backend { return []Backend{Memory, Redis} }

// Fleet returns n app instances of policy p on one new backend b, with
// opts after b's own options: the limiter of instance i is Fleet(...)[i].
// On a backend of several processes each instance has its own limiter on
// its own store and client; on [Memory] they are one limiter.
func Fleet(t testing.TB, n int, b Backend, p core.Policy, opts ...core.Option) []*core.Limiter {
	t.Helper()
	if n < 1 {
		t.Fatalf("testkit.Fleet: %d instances, want at least 1", n)
	}
	opts = append(append([]core.Option(nil), b.opts...), opts...)
	stores := b.stores(t, n)
	ls := make([]*core.Limiter, n)
	for i := range ls {
		if i < len(stores) {
			ls[i] = Limiter(t, stores[i], p, opts...)
		} else {
			ls[i] = ls[i%len(stores)]
		}
	}
	return ls
}

// Events is a core.Observer that keeps every event it sees. It is safe
// for concurrent use; the zero value is ready.
type Events struct {
	mu     sync.Mutex
	events []core.Event
}

// Observe implements core.Observer.
func (r *Events) Observe(_ context.Context, e core.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// All returns a copy of the events seen so far, in order.
func (r *Events) All() []core.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]core.Event(nil), r.events...)
}

// Of returns the events of kind seen so far, in order.
func (r *Events) Of(kind core.EventKind) []core.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []core.Event
	for _, e := range r.events {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// Count returns how many events of kind were seen.
func (r *Events) Count(kind core.EventKind) int {
	return r.count(func(e core.Event) bool { return e.Kind == kind })
}

// Denials returns how many decisions denied.
func (r *Events) Denials() int {
	return r.count(func(e core.Event) bool { return e.Kind == core.EventDecision && !e.Decision.Allowed })
}

func (r *Events) count(match func(core.Event) bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if match(e) {
			n++
		}
	}
	return n
}

// EventCounts is a core.Observer that counts the events it sees by kind
// and keeps only their errors, so that a long run under load costs no
// memory per decision (where [Events] keeps every event). It is safe for
// concurrent use; the zero value is ready.
type EventCounts struct {
	mu        sync.Mutex
	counts    map[core.EventKind]int
	fallbacks int
	errs      []error
}

// Observe implements core.Observer.
func (o *EventCounts) Observe(_ context.Context, e core.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.counts == nil {
		o.counts = make(map[core.EventKind]int)
	}
	o.counts[e.Kind]++
	if e.Kind == core.EventDecision && e.Decision.Source.Fallback() {
		o.fallbacks++
	}
	if e.Err != nil {
		o.errs = append(o.errs, e.Err)
	}
}

// Count returns how many events of kind were seen.
func (o *EventCounts) Count(kind core.EventKind) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.counts[kind]
}

// Fallbacks returns how many decisions the failure policy made (the
// local store's, FailOpen's or FailClosed's) rather than the store.
func (o *EventCounts) Fallbacks() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.fallbacks
}

// Errs returns a copy of the errors the events seen so far carried, in
// order.
func (o *EventCounts) Errs() []error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]error(nil), o.errs...)
}

// FailingStore is a core.Store that is down: every call fails with Err.
type FailingStore struct{ Err error }

// Take implements core.Store.
func (s FailingStore) Take(context.Context, driver.Query) (driver.Result, error) {
	return driver.Result{}, s.Err
}

// Peek implements core.Store.
func (s FailingStore) Peek(context.Context, driver.Query) (driver.Result, error) {
	return driver.Result{}, s.Err
}

// Refund implements core.Store.
func (s FailingStore) Refund(context.Context, driver.Query, int64) error { return s.Err }

// Reset implements core.Store.
func (s FailingStore) Reset(context.Context, driver.Query) error { return s.Err }

var _ core.Store = FailingStore{}

// UserHeader is the header field [UserKey] keys by.
const UserHeader = "X-User"

// ErrMalformedUser is the error of [UserKey] for the user "!".
var ErrMalformedUser = errors.New("testkit: malformed user")

// UserKey keys a request by its [UserHeader]: none is no key
// (keyfunc.ErrNoKey), and "!" is a malformed key source
// ([ErrMalformedUser]).
func UserKey(r keyfunc.Request) (string, error) {
	switch u := r.Header(UserHeader); u {
	case "":
		return "", keyfunc.ErrNoKey
	case "!":
		return "", ErrMalformedUser
	default:
		return u, nil
	}
}

// WaitUntil polls cond every millisecond, and fails t after 10 s, naming
// what it waited for.
func WaitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	WaitUntilWithin(t, 10*time.Second, what, cond)
}

// WaitUntilWithin is WaitUntil with a bound of its own, for a condition
// the library promises within a time of its own (plus a loaded machine's
// slack).
func WaitUntilWithin(t testing.TB, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(bound); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

// Plans is an app's plan table, which tests change under a limiter:
// its Resolve is the tier resolver of core.WithTiers. It is safe for
// concurrent use.
type Plans struct {
	mu    sync.Mutex
	tier  map[string]string
	calls int
}

// NewPlans returns the plan table of the tier of each key in tiers.
func NewPlans(tiers map[string]string) *Plans { return &Plans{tier: tiers} }

// Resolve returns key's tier, and an error for a key without one.
func (p *Plans) Resolve(_ context.Context, key string) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	t, ok := p.tier[key]
	if !ok {
		return "", errors.New("unknown key")
	}
	return t, nil
}

// Set moves key to tier.
func (p *Plans) Set(key, tier string) {
	p.mu.Lock()
	p.tier[key] = tier
	p.mu.Unlock()
}

// Calls returns how many times Resolve was called.
func (p *Plans) Calls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}

// PastClock returns a clock that tests set (now, and step to move it)
// starting an hour behind the real one and on a whole millisecond, so
// that Redis keeps the keys a test writes for the whole test whatever the
// test steps the clock to (a lease's key lives until its leases expire in
// the clock's time).
func PastClock() (now func() time.Time, step func(time.Duration)) {
	var mu sync.Mutex
	t := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	return func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			return t
		}, func(d time.Duration) {
			mu.Lock()
			t = t.Add(d)
			mu.Unlock()
		}
}

// VerifyNoLeaks fails t if goroutines other than those opts ignore are
// still running after a few seconds. go-redis ends its dialing goroutines
// some time after Close (one sleeps 1 s between dial probes), so it waits
// instead of ignoring them.
func VerifyNoLeaks(t testing.TB, opts ...goleak.Option) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := goleak.Find(opts...)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("goroutines leaked: %v", err)
			return
		}
	}
}

// HashAliases checks on b that a key of the shape of another key's hash
// is not that key: the hash of a key over 128 bytes (driver.BoundKey)
// sent as a key of its own neither spends the long key's limit nor passes
// its challenge, on two instances.
func HashAliases(t *testing.T, b Backend) {
	t.Helper()
	ctx := context.Background()
	victim := "203.0.113.9/" + strings.Repeat("v", 200)
	alias := driver.BoundKey(victim)
	ls := Fleet(t, 2, b, core.Policy{Name: "alias", Rules: []core.Rule{{Limit: 4, Window: time.Hour, Challenge: 3}}})
	// The alias's own limit, on either instance: 2, a pass, the 3rd.
	for i := range 3 {
		if i == 2 {
			if err := ls[0].Pass(ctx, alias); err != nil {
				t.Fatal(err)
			}
		}
		if d, err := ls[i%2].Allow(ctx, alias); err != nil || !d.Allowed {
			t.Fatalf("Allow(alias) #%d = %+v, %v; want admitted", i+1, d, err)
		}
	}
	for i := range 3 { // the victim's limit is whole: 2, then a challenge
		d, err := ls[1].Allow(ctx, victim)
		if want := i < 2; err != nil || d.Allowed != want || d.Challenged == want {
			t.Errorf("Allow(victim) #%d after 3 requests and a pass of its hash = %+v, %v; want admitted %v, challenged %v", i+1, d, err, want, !want)
		}
	}
}
