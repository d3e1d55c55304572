package ratekittest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/driver"
)

// Clock is a clock a test moves by hand: it reads the same time until
// [Clock.Advance] or [Clock.Set] moves it. It is safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock at 2029-01-01 00:00:00 UTC, a Monday: the
// start of a day, a week and a month alike, so that a test of a calendar
// quota reads the same periods whenever it runs.
func NewClock() *Clock {
	return &Clock{now: time.Date(2029, time.January, 1, 0, 0, 0, 0, time.UTC)}
}

// Now returns the clock's time. Pass it to core.WithClock to decide a
// limiter on another store at the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock on by d (back, when d is negative).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Set moves the clock to t: to the eve of a calendar period in a
// customer's time zone, for example.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t.Round(0) // no monotonic reading: the clock's time is t's wall time
}

// Store is an in-process store, a core.MemoryStore whose decisions,
// challenge passes and leases are made at its clock's time: every
// limiter on it, however it was built (core.NewLimiter, an adapter's
// LimitByIP with guard.WithStore), decides as time passes on the clock,
// and only then. A limiter built with core.WithClock decides at its own
// clock's time instead.
//
// It has what a MemoryStore has: sliding windows and buckets, calendar
// periods, lockouts, challenges ([driver.Challenges]), the leases of
// concurrency limits ([driver.Leases]), which never expire (a request's
// lease is held until its decision is refunded, as the adapters do when
// the request ends), and the refusals of Limiter.TopRefused
// ([driver.Refusals]), counted by the process's clock, and grants
// ([driver.Grants]), which end by the clock. It is [driver.Local],
// as a MemoryStore is: limiters on it have no timeout, circuit breaker,
// deny cache or failure policy. It is safe for concurrent use.
type Store struct {
	mem   *core.MemoryStore
	clock *Clock
}

var _ driver.LocalProfile = (*Store)(nil)

// NewStore returns an empty store on clock. It panics if clock is nil.
func NewStore(clock *Clock) *Store {
	if clock == nil {
		panic("ratekittest: NewStore: clock is nil")
	}
	return &Store{mem: core.NewMemoryStore(), clock: clock}
}

// at returns now, a call's time in µs, or the clock's when it is 0.
func (s *Store) at(now int64) int64 {
	if now != 0 {
		return now
	}
	return s.clock.Now().UnixMicro()
}

// Take implements core.Store, at the clock's time unless q.Now is set.
func (s *Store) Take(ctx context.Context, q driver.Query) (driver.Result, error) {
	q.Now = s.at(q.Now)
	return s.mem.Take(ctx, q)
}

// Peek implements core.Store, at the clock's time unless q.Now is set.
func (s *Store) Peek(ctx context.Context, q driver.Query) (driver.Result, error) {
	q.Now = s.at(q.Now)
	return s.mem.Peek(ctx, q)
}

// Refund implements core.Store.
func (s *Store) Refund(ctx context.Context, q driver.Query, at int64) error {
	return s.mem.Refund(ctx, q, at)
}

// Reset implements core.Store.
func (s *Store) Reset(ctx context.Context, q driver.Query) error {
	return s.mem.Reset(ctx, q)
}

// Local implements [driver.Local]: the store keeps its windows in this
// process.
func (s *Store) Local() {}

// Pass implements [driver.Challenges]: the pass runs from the clock's time
// unless q.Now is set.
func (s *Store) Pass(ctx context.Context, q driver.Query) error {
	q.Now = s.at(q.Now)
	return s.mem.Pass(ctx, q)
}

// TakeLease implements [driver.Leases].
func (s *Store) TakeLease(ctx context.Context, l driver.Lease) (ok bool, held int64, err error) {
	l.Now = s.at(l.Now)
	return s.mem.TakeLease(ctx, l)
}

// HeldLeases implements [driver.Leases].
func (s *Store) HeldLeases(ctx context.Context, l driver.Lease) (int64, error) {
	l.Now = s.at(l.Now)
	return s.mem.HeldLeases(ctx, l)
}

// ReleaseLease implements [driver.Leases].
func (s *Store) ReleaseLease(ctx context.Context, l driver.Lease) error {
	l.Now = s.at(l.Now)
	return s.mem.ReleaseLease(ctx, l)
}

// RenewLeases implements [driver.Leases].
func (s *Store) RenewLeases(ctx context.Context, ls []driver.Lease, held []bool) error {
	ls = append([]driver.Lease(nil), ls...)
	for i := range ls {
		ls[i].Now = s.at(ls[i].Now)
	}
	return s.mem.RenewLeases(ctx, ls, held)
}

// AddRefused implements [driver.Refusals].
func (s *Store) AddRefused(ctx context.Context, policy string, refused []driver.RefusedKey) error {
	return s.mem.AddRefused(ctx, policy, refused)
}

// TopRefused implements [driver.Refusals].
func (s *Store) TopRefused(ctx context.Context, policy string, n int) ([]driver.RefusedKey, error) {
	return s.mem.TopRefused(ctx, policy, n)
}

// NewLimiter returns a limiter of p with opts on a new [Store], and the
// store's [Clock], at 2029-01-01 00:00:00 UTC (see [NewClock]). It fails
// t with core.NewLimiter's error, which names the field at fault, when p
// or an option cannot work. The limiter needs nothing ended when t ends.
func NewLimiter(t testing.TB, p core.Policy, opts ...core.Option) (*core.Limiter, *Clock) {
	t.Helper()
	clock := NewClock()
	l, err := core.NewLimiter(NewStore(clock), p, opts...)
	if err != nil {
		t.Fatalf("ratekittest.NewLimiter: %v", err)
	}
	return l, clock
}

// SetGrant implements [driver.Grants]: a grant holds until its Until by
// the clock.
func (s *Store) SetGrant(ctx context.Context, policy, key string, g driver.Grant) error {
	return s.mem.SetGrant(ctx, policy, key, g)
}

// GrantOf implements [driver.Grants], by the clock's time.
func (s *Store) GrantOf(ctx context.Context, policy, key string) (driver.Grant, bool, error) {
	g, ok, err := s.mem.GrantOf(ctx, policy, key)
	if ok && !g.Until.After(s.clock.Now()) {
		return driver.Grant{}, false, err
	}
	return g, ok, err
}
