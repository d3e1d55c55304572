// Package drivertest is the behavioural suite every [core.Store] passes, in
// the spirit of testing/fstest.TestFS: [Run] drives a store through
// [core.NewLimiter] (and directly where the store's own answer is the
// point) and checks exact admission under concurrency, multi-rule binding,
// exact RetryAfter, Peek, Reset, Refund, cost validation, bounded keys,
// window expiry, lockouts, calendar rules, challenges and the refusals
// kept ([driver.Refusals]).
package drivertest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/driver"
)

// callTimeout bounds every store call of the suite. It is generous on
// purpose: the suite checks what a store decides, not how fast, and a
// fallback decision on a loaded machine would make the counts meaningless.
// Every decision is checked to come from the store (or the deny cache).
const callTimeout = 5 * time.Second

// slack is what time bracket checks allow beyond the bracket itself, for
// rounding to microseconds.
const slack = time.Millisecond

// driftPPM is the clock-rate difference a bracket check allows between the
// store's clock and the clock the bracket is read from, in parts per
// million of the time measured (NTP slews a clock by at most 500 ppm).
const driftPPM = 500

// Run runs the suite against stores made by newStore. Each subtest calls
// newStore once and uses policy names of its own, so stores made by
// newStore may share one backend (one Redis server). Subtests run in
// parallel.
//
// opts are given to every limiter the suite builds, for example
// core.WithClock(time.Now) to run the suite with client time.
func Run(t *testing.T, newStore func(t *testing.T) core.Store, opts ...core.Option) {
	s := &suite{newStore: newStore, nonce: nonce(t), opts: opts}
	for _, tc := range []struct {
		name string
		f    func(t *testing.T, s *suite)
	}{
		{"ConcurrentAdmission", testConcurrentAdmission},
		{"ConcurrentTakeRetryAfter", testConcurrentTakeRetryAfter},
		{"SameInstantUnits", testSameInstantUnits},
		{"MultiRuleBinding", testMultiRuleBinding},
		{"MultiRuleStore", testMultiRuleStore},
		{"ExactRetryAfter", testExactRetryAfter},
		{"RetryAfterBracket", testRetryAfterBracket},
		{"RemainingLimitResetAfter", testRemaining},
		{"AllowN", testAllowN},
		{"InvalidCost", testInvalidCost},
		{"CanceledContext", testCanceledContext},
		{"Peek", testPeek},
		{"Reset", testReset},
		{"Refund", testRefund},
		{"RefundAfterReset", testRefundAfterReset},
		{"NextAfter", testNextAfter},
		{"Isolation", testIsolation},
		{"NewLimiterValidation", testValidation},
		{"LongKeys", testLongKeys},
		{"WindowExpiry", testWindowExpiry},
		{"Lockout", testLockout},
		{"LockoutGrowth", testLockoutGrowth},
		{"LockoutServerTime", testLockoutServerTime},
		{"LockoutConcurrent", testLockoutConcurrent},
		{"LockoutPeekRefundReset", testLockoutPeekRefundReset},
		{"CalendarPeriods", testCalendarPeriods},
		{"CalendarConcurrent", testCalendarConcurrent},
		{"CalendarBoundary", testCalendarBoundary},
		{"CalendarRefundReset", testCalendarRefundReset},
		{"Refusals", testRefusals},
		{"Challenge", testChallenge},
		{"ChallengeRules", testChallengeRules},
		{"ChallengeLockout", testChallengeLockout},
		{"ChallengeConcurrent", testChallengeConcurrent},
		{"Grants", testGrants},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.f(t, s)
		})
	}
}

type suite struct {
	newStore func(t *testing.T) core.Store
	opts     []core.Option // for every limiter
	nonce    string
	seq      atomic.Int64
}

func nonce(t *testing.T) string {
	t.Helper()
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// name returns a policy name no other subtest (or earlier run on the same
// backend) uses.
func (s *suite) name() string {
	return fmt.Sprintf("st-%s-%d", s.nonce, s.seq.Add(1))
}

// options returns the options of a suite limiter: the call timeout, the
// suite's options, then opts.
func (s *suite) options(opts ...core.Option) []core.Option {
	return append(append([]core.Option{core.WithTimeout(callTimeout)}, s.opts...), opts...)
}

// store returns a new store wrapped in a spy.
func (s *suite) store(t *testing.T) *spy {
	t.Helper()
	return &spy{Store: s.newStore(t)}
}

// spied returns sp as the limiter should see it: with the capabilities of
// the store it wraps, where the suite knows their combination (an
// in-process store, or a shared one with every capability); else as a
// Store alone.
func spied(sp *spy) core.Store {
	switch st := sp.Store.(type) {
	case localCaps:
		return &localSpy{sp, st}
	case sharedCaps:
		return &sharedSpy{sp, st}
	}
	return sp
}

// localCaps are the capabilities of an in-process store (MemoryStore).
type localCaps interface {
	driver.Local
	driver.Leases
	driver.Challenges
}

// sharedCaps are the capabilities of a shared store (the Redis drivers).
type sharedCaps interface {
	core.Store
	driver.Leases
	driver.Challenges
	driver.Invalidator
	driver.Fleet
	driver.Partitioned
	driver.Checker
}

type localSpy struct {
	*spy
	localCaps
}

func (s *localSpy) Take(ctx context.Context, q driver.Query) (driver.Result, error) {
	return s.spy.Take(ctx, q)
}
func (s *localSpy) Peek(ctx context.Context, q driver.Query) (driver.Result, error) {
	return s.spy.Peek(ctx, q)
}
func (s *localSpy) Refund(ctx context.Context, q driver.Query, at int64) error {
	return s.spy.Refund(ctx, q, at)
}
func (s *localSpy) Reset(ctx context.Context, q driver.Query) error { return s.spy.Reset(ctx, q) }

type sharedSpy struct {
	*spy
	sharedCaps
}

func (s *sharedSpy) Take(ctx context.Context, q driver.Query) (driver.Result, error) {
	return s.spy.Take(ctx, q)
}
func (s *sharedSpy) Peek(ctx context.Context, q driver.Query) (driver.Result, error) {
	return s.spy.Peek(ctx, q)
}
func (s *sharedSpy) Refund(ctx context.Context, q driver.Query, at int64) error {
	return s.spy.Refund(ctx, q, at)
}
func (s *sharedSpy) Reset(ctx context.Context, q driver.Query) error { return s.spy.Reset(ctx, q) }

// limiter returns a limiter for rules on a new store, with the suite's
// call timeout before opts.
func (s *suite) limiter(t *testing.T, rules []core.Rule, opts ...core.Option) (*core.Limiter, *spy) {
	t.Helper()
	st := s.store(t)
	l, err := core.NewLimiter(spied(st), core.Policy{Name: s.name(), Rules: rules}, s.options(opts...)...)
	if err != nil {
		t.Fatalf("NewLimiter: %v", err)
	}
	return l, st
}

// spy is a Store that records what the limiter asks of the store it wraps.
type spy struct {
	core.Store
	takes  atomic.Int64
	maxKey atomic.Int64
	mu     sync.Mutex
	keys   map[string]bool
}

func (s *spy) see(q driver.Query) {
	for {
		m := s.maxKey.Load()
		if int64(len(q.Key)) <= m || s.maxKey.CompareAndSwap(m, int64(len(q.Key))) {
			break
		}
	}
	s.mu.Lock()
	if s.keys == nil {
		s.keys = make(map[string]bool)
	}
	s.keys[q.Key] = true
	s.mu.Unlock()
}

func (s *spy) Take(ctx context.Context, q driver.Query) (driver.Result, error) {
	s.takes.Add(1)
	s.see(q)
	return s.Store.Take(ctx, q)
}

func (s *spy) Peek(ctx context.Context, q driver.Query) (driver.Result, error) {
	s.see(q)
	return s.Store.Peek(ctx, q)
}

func (s *spy) Refund(ctx context.Context, q driver.Query, at int64) error {
	s.see(q)
	return s.Store.Refund(ctx, q, at)
}

func (s *spy) Reset(ctx context.Context, q driver.Query) error {
	s.see(q)
	return s.Store.Reset(ctx, q)
}

func (s *spy) sawKey(k string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys[k]
}

// ctx returns a context bounded by the suite's call timeout.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), callTimeout)
	t.Cleanup(cancel)
	return c
}

// show formats a decision without its per-rule states.
func show(d core.Decision) string {
	return fmt.Sprintf("{Allowed:%v Limit:%d Remaining:%d RetryAfter:%v ResetAfter:%v Rule:%d Source:%v}",
		d.Allowed, d.Limit, d.Remaining, d.RetryAfter, d.ResetAfter, d.Rule, d.Source)
}

// allowN calls l.AllowN and fails t on an error or a fallback decision.
func allowN(t *testing.T, l *core.Limiter, key string, n int64) core.Decision {
	t.Helper()
	d, err := l.AllowN(ctx(t), key, n)
	if err != nil {
		t.Fatalf("AllowN(%q, %d): %v", key, n, err)
	}
	if d.Source.Fallback() {
		t.Fatalf("AllowN(%q, %d) = %s, want a decision of the store", key, n, show(d))
	}
	return d
}

func allow(t *testing.T, l *core.Limiter, key string) core.Decision {
	t.Helper()
	return allowN(t, l, key, 1)
}

func peek(t *testing.T, l *core.Limiter, key string) core.Decision {
	t.Helper()
	d, err := l.Peek(ctx(t), key)
	if err != nil {
		t.Fatalf("Peek(%q): %v", key, err)
	}
	if d.Source != core.SourceStore {
		t.Fatalf("Peek(%q) = %s, want Source store", key, show(d))
	}
	return d
}

// inBracket reports whether got is a possible RetryAfter for a unit
// admitted between firstBefore and firstAfter to leave a window w, seen by
// a decision made between before and after. The store's clock readings are
// only known to lie within those local readings, so the bracket is as
// tight as the calls were fast: no tolerance is guessed.
//
// A store reads either this machine's wall clock (Redis TIME, client time)
// or its monotonic clock (MemoryStore), and the two can run at different
// rates while the wall clock is slewed; got must fit the bracket read from
// one of them. lo and hi are the bracket's union.
func inBracket(got, w time.Duration, firstBefore, firstAfter, before, after time.Time) (lo, hi time.Duration, ok bool) {
	bracket := func(firstBefore, firstAfter, before, after time.Time) (lo, hi time.Duration) {
		drift := w * driftPPM / 1e6
		return w - after.Sub(firstBefore) - slack - drift, w - before.Sub(firstAfter) + slack + drift
	}
	// Sub uses the monotonic readings; Round(0) strips them, leaving the
	// wall clock.
	mlo, mhi := bracket(firstBefore, firstAfter, before, after)
	wlo, whi := bracket(firstBefore.Round(0), firstAfter.Round(0), before.Round(0), after.Round(0))
	ok = got >= mlo && got <= mhi || got >= wlo && got <= whi
	return min(mlo, wlo), max(mhi, whi), ok
}

// hammer sends goroutines x each Allow("k") at once from one start, the
// goroutines spread over the limiters ls (app instances on one store). It
// fails t on an error, a fallback or an admission not by the store, hands
// every denial to denied (concurrently), and returns how many were
// allowed.
func hammer(t *testing.T, ls []*core.Limiter, goroutines, each int, denied func(core.Decision)) int64 {
	t.Helper()
	var allowed atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	c := ctx(t)
	for g := range goroutines {
		wg.Go(func() {
			<-start
			for range each {
				d, err := ls[g%len(ls)].Allow(c, "k")
				switch {
				case err != nil:
					t.Errorf("Allow(k): %v", err)
				case d.Source.Fallback():
					t.Errorf("Allow(k) = %s, want a decision of the store", show(d))
				case d.Allowed && d.Source != core.SourceStore:
					t.Errorf("Allow(k) = %s, want admissions from the store", show(d))
				case d.Allowed:
					allowed.Add(1)
				default:
					denied(d)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	return allowed.Load()
}

// instances returns n limiters of p on st: n app instances sharing it.
func instances(t *testing.T, s *suite, st *spy, p core.Policy, n int) []*core.Limiter {
	t.Helper()
	ls := make([]*core.Limiter, n)
	for i := range ls {
		l, err := core.NewLimiter(spied(st), p, s.options()...)
		if err != nil {
			t.Fatal(err)
		}
		ls[i] = l
	}
	return ls
}

func testConcurrentAdmission(t *testing.T, s *suite) {
	const (
		limit      = 100
		goroutines = 32
		each       = 10
	)
	l, _ := s.limiter(t, []core.Rule{{Limit: limit, Window: time.Minute}})
	var denied atomic.Int64
	allowed := hammer(t, []*core.Limiter{l}, goroutines, each, func(core.Decision) { denied.Add(1) })
	if allowed != limit {
		t.Errorf("%d goroutines x %d Allow with Limit %d: %d allowed, want exactly %d", goroutines, each, limit, allowed, limit)
	}
	if got := denied.Load(); got != goroutines*each-limit {
		t.Errorf("%d denied, want %d", got, goroutines*each-limit)
	}
	// Units admitted at the same microsecond must all count.
	d := peek(t, l, "k")
	if d.Allowed || d.Rules()[0].Used != limit || d.Remaining != 0 {
		t.Errorf("Peek after the flood = %s, Used %d; want denied with Used %d, Remaining 0", show(d), d.Rules()[0].Used, limit)
	}
}

// testConcurrentTakeRetryAfter is the classic case at the store level:
// 1005 takes at once with Limit 1000 admit 1000, and each of the 5
// denials says exactly when the oldest unit leaves the window.
func testConcurrentTakeRetryAfter(t *testing.T, s *suite) {
	const (
		limit  = 1000
		extra  = 5
		window = time.Minute
	)
	st := s.store(t)
	q := driver.Query{Policy: s.name(), Key: "k", Rules: []driver.Rule{{Limit: limit, Window: window}}, N: 1}
	results := make([]driver.Result, limit+extra)
	var wg sync.WaitGroup
	start := make(chan struct{})
	c := ctx(t)
	for i := range results {
		wg.Go(func() {
			<-start
			r, err := st.Take(c, q)
			if err != nil {
				t.Errorf("Take #%d: %v", i, err)
			}
			results[i] = r
		})
	}
	close(start)
	wg.Wait()
	if t.Failed() {
		return
	}
	var admitted int
	oldest := int64(-1)
	for _, r := range results {
		if r.Allowed {
			admitted++
			if oldest < 0 || r.At < oldest {
				oldest = r.At
			}
		}
	}
	if admitted != limit {
		t.Fatalf("%d concurrent Take with Limit %d: %d admitted, want %d", limit+extra, limit, admitted, limit)
	}
	for _, r := range results {
		if r.Allowed {
			continue
		}
		want := time.Duration(oldest+window.Microseconds()-r.At) * time.Microsecond
		if got := r.Rules.All()[0].RetryAfter; got != want {
			t.Errorf("denied Take at %d: RetryAfter %v, want %v (oldest %d + window - at)", r.At, got, want, oldest)
		}
		if r.Rules.All()[0].Used != limit {
			t.Errorf("denied Take at %d: Used %d, want %d", r.At, r.Rules.All()[0].Used, limit)
		}
	}
}

func testSameInstantUnits(t *testing.T, s *suite) {
	l, _ := s.limiter(t, []core.Rule{{Limit: 10, Window: time.Minute}})
	for i, want := range []int64{5, 10} {
		d := allowN(t, l, "k", 5)
		if !d.Allowed || d.Rules()[0].Used != want {
			t.Errorf("AllowN(k, 5) #%d = %s, Used %d; want allowed with Used %d", i+1, show(d), d.Rules()[0].Used, want)
		}
	}
	if d := allow(t, l, "k"); d.Allowed {
		t.Errorf("Allow(k) after 2 x AllowN(k, 5) with Limit 10 = %s, want denied", show(d))
	}
}

// The rules of testMultiRuleBinding: 1 per bindShort and 3 per bindLong.
const (
	bindShort = 200 * time.Millisecond
	bindLong  = time.Second
)

// testMultiRuleBinding checks 1/200ms + 3/1s: a denial names the rule
// that binds, with that rule's RetryAfter.
func testMultiRuleBinding(t *testing.T, s *suite) {
	l, _ := s.limiter(t, []core.Rule{{Limit: 1, Window: bindShort}, {Limit: 3, Window: bindLong}}, core.WithDenyCache(0))
	retryTiming(t, func(key string) bool {
		t1b, t1a, retry, ok := bindFirst(t, l, key)
		if !ok {
			return false
		}
		// Units 2 and 3, each as soon as the 200 ms rule allows.
		time.Sleep(retry + 2*time.Millisecond)
		t3b, t3a := bindRefill(t, l, key)
		return bindBoth(t, l, key, t1b, t1a, t3b, t3a)
	})
}

// bindFirst is the start of testMultiRuleBinding: unit 1, made between
// t1b and t1a, then a unit that only the 200 ms rule denies, for retry. It
// reports false when a stall put the second past the window.
func bindFirst(t *testing.T, l *core.Limiter, key string) (t1b, t1a time.Time, retry time.Duration, ok bool) {
	t.Helper()
	t1b = time.Now()
	d := allow(t, l, key)
	t1a = time.Now()
	if !d.Allowed || d.Rule != 0 || d.Limit != 1 || d.Window != bindShort || d.Remaining != 0 || d.Rules()[1].Remaining() != 2 {
		t.Fatalf("Allow #1 = %s, want allowed, binding Rules[0] (1 per %v, Remaining 0), Rules[1] Remaining 2", show(d), bindShort)
	}

	// Only the 200 ms rule is violated.
	b := time.Now()
	d = allow(t, l, key)
	a := time.Now()
	// The decisions were made within [t1b, t1a] and [b, a]: a stall
	// anywhere in them may have put the second past the window.
	if d.Allowed && a.Sub(t1b) >= bindShort {
		return t1b, t1a, 0, false // stalled past the window: allowed rightly
	}
	if d.Allowed || d.Rule != 0 || d.Limit != 1 {
		t.Fatalf("Allow #2 right after #1 = %s, want denied by Rules[0] (1 per %v)", show(d), bindShort)
	}
	if d.Rules()[1].RetryAfter != 0 {
		t.Errorf("Allow #2: Rules[1].RetryAfter = %v, want 0 (3 per %v has room)", d.Rules()[1].RetryAfter, bindLong)
	}
	if lo, hi, ok := inBracket(d.RetryAfter, bindShort, t1b, t1a, b, a); !ok {
		t.Errorf("Allow #2: RetryAfter = %v, want in [%v, %v]", d.RetryAfter, lo, hi)
	}
	return t1b, t1a, d.RetryAfter, true
}

// bindRefill takes units 2 and 3 of testMultiRuleBinding, the 3rd once
// the 200 ms rule frees, and returns when unit 3 was made.
func bindRefill(t *testing.T, l *core.Limiter, key string) (t3b, t3a time.Time) {
	t.Helper()
	for i := 2; i <= 3; i++ {
		t3b = time.Now()
		d := allow(t, l, key)
		t3a = time.Now()
		if !d.Allowed {
			t.Fatalf("Allow of unit %d after the %v rule freed = %s, want allowed", i, bindShort, show(d))
		}
		if want := int64(3 - i); d.Rules()[1].Remaining() != want {
			t.Errorf("Allow of unit %d: Rules[1] Remaining %d, want %d", i, d.Rules()[1].Remaining(), want)
		}
		if i == 2 {
			time.Sleep(d.Rules()[0].ResetAfter + 2*time.Millisecond)
		}
	}
	return t3b, t3a
}

// bindBoth is the end of testMultiRuleBinding: both rules are violated
// now, the 200 ms one by unit 3, the 1 s one by units 1-3, and the one
// that frees last binds. It reports whether the timing held.
func bindBoth(t *testing.T, l *core.Limiter, key string, t1b, t1a, t3b, t3a time.Time) bool {
	t.Helper()
	b := time.Now()
	d := allow(t, l, key)
	a := time.Now()
	if d.Allowed && b.Sub(t3a) >= bindShort {
		return false
	}
	if d.Allowed || d.Remaining != 0 {
		t.Fatalf("Allow #4 = %s, want denied, Remaining 0", show(d))
	}
	r0, r1 := d.Rules()[0].RetryAfter, d.Rules()[1].RetryAfter
	if lo, hi, ok := inBracket(r0, bindShort, t3b, t3a, b, a); !ok {
		t.Errorf("Allow #4: Rules[0].RetryAfter = %v, want in [%v, %v] (unit 3 leaving the %v window)", r0, lo, hi, bindShort)
	}
	if lo, hi, ok := inBracket(r1, bindLong, t1b, t1a, b, a); !ok {
		t.Errorf("Allow #4: Rules[1].RetryAfter = %v, want in [%v, %v] (unit 1 leaving the %v window)", r1, lo, hi, bindLong)
	}
	want := 0
	if r1 > r0 {
		want = 1
	}
	if d.Rule != want || d.RetryAfter != max(r0, r1) || d.Limit != d.Rules()[want].Limit || d.Window != d.Rules()[want].Window {
		t.Errorf("Allow #4 = %s with Rules[0].RetryAfter %v, Rules[1].RetryAfter %v; want binding Rules[%d] and its RetryAfter", show(d), r0, r1, want)
	}
	// Unit 3 came 400 ms after unit 1 unless the machine stalled: the
	// 1 s rule must be the one that binds then.
	if t3a.Add(bindShort).Before(t1b.Add(bindLong)) && d.Rule != 1 {
		t.Errorf("Allow #4 = %s, want denied by Rules[1] (3 per %v), which frees last", show(d), bindLong)
	}
	return t3a.Add(bindShort).Before(t1b.Add(bindLong))
}

// testMultiRuleStore checks the store's own answer for two rules: each
// rule's RetryAfter is exact, and a denial records nothing in any rule.
func testMultiRuleStore(t *testing.T, s *suite) {
	const (
		w1 = 30 * time.Second
		w2 = time.Minute
	)
	st := s.store(t)
	rules := []driver.Rule{{Limit: 2, Window: w1}, {Limit: 3, Window: w2}}
	q := driver.Query{Policy: s.name(), Key: "k", Rules: rules, N: 1}
	take := func(id string, n int64) driver.Result {
		t.Helper()
		q := q
		q.N = n
		r, err := st.Take(ctx(t), q)
		if err != nil {
			t.Fatalf("Take(%s, %d): %v", id, n, err)
		}
		return r
	}
	r1 := take("a", 2)
	if !r1.Allowed || r1.Rules.All()[0].Used != 2 || r1.Rules.All()[1].Used != 2 {
		t.Fatalf("Take(a, 2) = %+v, want allowed, Used 2 in both rules", r1)
	}
	multiRuleFirstBinds(t, take("b", 1), r1.At, w1)
	// 2 units violate both rules: Rules[1] needs 1 of a's units gone too.
	multiRuleBothBind(t, take("c", 2), r1.At, w2)
	p, err := st.Peek(ctx(t), q)
	if err != nil {
		t.Fatal(err)
	}
	if p.Rules.All()[0].Used != 2 || p.Rules.All()[1].Used != 2 {
		t.Errorf("Peek after denials = %+v, want Used 2 in both rules (denials record nothing)", p)
	}
}

// multiRuleFirstBinds checks r, the answer to Take(b, 1) after 2 units
// taken at at: denied by Rules[0] (of window w1) alone.
func multiRuleFirstBinds(t *testing.T, r driver.Result, at int64, w1 time.Duration) {
	t.Helper()
	if r.Allowed {
		t.Fatalf("Take(b, 1) = %+v, want denied by Rules[0]", r)
	}
	if want := time.Duration(at+w1.Microseconds()-r.At) * time.Microsecond; r.Rules.All()[0].RetryAfter != want {
		t.Errorf("Take(b, 1): Rules[0].RetryAfter = %v, want %v", r.Rules.All()[0].RetryAfter, want)
	}
	if r.Rules.All()[1].RetryAfter != 0 || r.Rules.All()[1].Used != 2 {
		t.Errorf("Take(b, 1): Rules[1] = %+v, want room (RetryAfter 0, Used 2)", r.Rules.All()[1])
	}
}

// multiRuleBothBind checks r, the answer to Take(c, 2) after 2 units
// taken at at: denied by both rules, Rules[1] (of window w2) until a's
// units leave it.
func multiRuleBothBind(t *testing.T, r driver.Result, at int64, w2 time.Duration) {
	t.Helper()
	if r.Allowed || r.Rules.All()[0].RetryAfter <= 0 || r.Rules.All()[1].RetryAfter <= 0 {
		t.Fatalf("Take(c, 2) = %+v, want denied by both rules", r)
	}
	if want := time.Duration(at+w2.Microseconds()-r.At) * time.Microsecond; r.Rules.All()[1].RetryAfter != want {
		t.Errorf("Take(c, 2): Rules[1].RetryAfter = %v, want %v", r.Rules.All()[1].RetryAfter, want)
	}
}

// testExactRetryAfter checks, at the store level where the decision's
// time is known, that RetryAfter is exactly when enough units leave.
func testExactRetryAfter(t *testing.T, s *suite) {
	const window = time.Minute
	st := s.store(t)
	q := driver.Query{Policy: s.name(), Key: "k", Rules: []driver.Rule{{Limit: 3, Window: window}}}
	var at [3]int64
	for i := range at {
		q.N = 1
		r, err := st.Take(ctx(t), q)
		if err != nil || !r.Allowed {
			t.Fatalf("Take(u%d) = %+v, %v; want allowed", i, r, err)
		}
		at[i] = r.At
		if i > 0 && at[i] < at[i-1] {
			t.Errorf("Take(u%d).At = %d, before the previous %d", i, at[i], at[i-1])
		}
	}
	for _, tc := range []struct {
		name   string
		n      int64
		peek   bool
		oldest int // the unit that must leave
	}{
		{"take 1", 1, false, 0},
		{"take 2", 2, false, 1},
		{"take 3", 3, false, 2},
		{"peek 1", 1, true, 0},
		{"peek 2", 2, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := q
			q.N = tc.n
			var (
				r   driver.Result
				err error
			)
			if tc.peek {
				r, err = st.Peek(ctx(t), q)
			} else {
				r, err = st.Take(ctx(t), q)
			}
			if err != nil {
				t.Fatal(err)
			}
			want := time.Duration(at[tc.oldest]+window.Microseconds()-r.At) * time.Microsecond
			if r.Allowed || r.Rules.All()[0].RetryAfter != want {
				t.Errorf("%s on a full window = Allowed %v, RetryAfter %v; want denied, RetryAfter %v", tc.name, r.Allowed, r.Rules.All()[0].RetryAfter, want)
			}
			if want := time.Duration(at[2]+window.Microseconds()-r.At) * time.Microsecond; r.Rules.All()[0].ResetAfter != want {
				t.Errorf("%s: ResetAfter %v, want %v (newest unit leaving)", tc.name, r.Rules.All()[0].ResetAfter, want)
			}
		})
	}
}

// testRetryAfterBracket checks RetryAfter through the limiter, against
// this process's clock.
func testRetryAfterBracket(t *testing.T, s *suite) {
	const window = time.Second
	l, _ := s.limiter(t, []core.Rule{{Limit: 2, Window: window}}, core.WithDenyCache(0))
	retryTiming(t, func(key string) bool {
		b1 := time.Now()
		allow(t, l, key)
		a1 := time.Now()
		allow(t, l, key)
		for i := range 3 {
			b := time.Now()
			d := allow(t, l, key)
			a := time.Now()
			if d.Allowed && b.Sub(a1) >= window {
				return false
			}
			if d.Allowed {
				t.Fatalf("Allow #%d on a full window = %s, want denied", i+3, show(d))
			}
			if lo, hi, ok := inBracket(d.RetryAfter, window, b1, a1, b, a); !ok {
				t.Errorf("Allow #%d: RetryAfter = %v, want in [%v, %v]", i+3, d.RetryAfter, lo, hi)
			}
			time.Sleep(5 * time.Millisecond)
		}
		return true
	})
}

// remainingStep is a step of testRemaining: AllowN(k, n) and the decision
// it must get.
type remainingStep struct {
	name          string
	n             int64
	wantAllowed   bool
	wantRemaining int64
}

func testRemaining(t *testing.T, s *suite) {
	const window = time.Minute
	l, _ := s.limiter(t, []core.Rule{{Limit: 5, Window: window}}, core.WithDenyCache(0))
	for _, tc := range []remainingStep{
		{"1st", 1, true, 4},
		{"2nd", 1, true, 3},
		{"3 more", 3, true, 0},
		{"over", 1, false, 0},
	} {
		d := allowN(t, l, "k", tc.n)
		if d.Allowed != tc.wantAllowed || d.Remaining != tc.wantRemaining || d.Limit != 5 || d.Source != core.SourceStore {
			t.Errorf("%s: AllowN(k, %d) = %s, want Allowed=%v Limit=5 Remaining=%d Source=store",
				tc.name, tc.n, show(d), tc.wantAllowed, tc.wantRemaining)
		}
		tc.checkTimes(t, d, window)
		if len(d.Rules()) != 1 || d.Rules()[0].Limit != 5 || d.Rules()[0].Window != window {
			t.Errorf("%s: Rules = %+v, want one state of 5 per %v", tc.name, d.Rules(), window)
		}
	}
	// An unknown key: everything left, nothing to reset.
	d := peek(t, l, "other")
	if !d.Allowed || d.Remaining != 5 || d.ResetAfter != 0 || d.RetryAfter != 0 {
		t.Errorf("Peek(other) = %s, want allowed, Remaining 5, ResetAfter 0", show(d))
	}
}

// checkTimes checks the ResetAfter and RetryAfter of the step's decision d
// on a rule of window.
func (tc remainingStep) checkTimes(t *testing.T, d core.Decision, window time.Duration) {
	t.Helper()
	switch {
	case d.Allowed && d.ResetAfter != window:
		// The newest unit was just admitted: the window is empty
		// exactly one window from now.
		t.Errorf("%s: ResetAfter = %v, want %v", tc.name, d.ResetAfter, window)
	case !d.Allowed && (d.ResetAfter <= 0 || d.ResetAfter > window || d.RetryAfter <= 0 || d.RetryAfter > d.ResetAfter):
		t.Errorf("%s: ResetAfter %v, RetryAfter %v; want 0 < RetryAfter <= ResetAfter <= %v", tc.name, d.ResetAfter, d.RetryAfter, window)
	case d.Allowed && d.RetryAfter != 0:
		t.Errorf("%s: RetryAfter = %v on an admission, want 0", tc.name, d.RetryAfter)
	}
}

func testAllowN(t *testing.T, s *suite) {
	l, _ := s.limiter(t, []core.Rule{{Limit: 10, Window: time.Minute}})
	for _, tc := range []struct {
		n             int64
		wantAllowed   bool
		wantRemaining int64
	}{
		{4, true, 6},
		{7, false, 6}, // does not fit: records nothing
		{6, true, 0},
		{1, false, 0},
	} {
		d := allowN(t, l, "k", tc.n)
		if d.Allowed != tc.wantAllowed || d.Remaining != tc.wantRemaining {
			t.Errorf("AllowN(k, %d) = %s, want Allowed=%v Remaining=%d", tc.n, show(d), tc.wantAllowed, tc.wantRemaining)
		}
	}
	// A larger request than a cached denial is denied too; a smaller one
	// goes to the store.
	l2, _ := s.limiter(t, []core.Rule{{Limit: 10, Window: time.Minute}})
	allowN(t, l2, "k", 8)
	if d := allowN(t, l2, "k", 3); d.Allowed {
		t.Fatalf("AllowN(k, 3) with 2 left = %s, want denied", show(d))
	}
	if d := allowN(t, l2, "k", 5); d.Allowed || d.RetryAfter <= 0 {
		t.Errorf("AllowN(k, 5) after AllowN(k, 3) was denied = %s, want denied with RetryAfter", show(d))
	}
	if d := allowN(t, l2, "k", 2); !d.Allowed || d.Remaining != 0 {
		t.Errorf("AllowN(k, 2) with 2 left = %s, want allowed, Remaining 0", show(d))
	}
}

func testInvalidCost(t *testing.T, s *suite) {
	l, st := s.limiter(t, []core.Rule{{Limit: 10, Window: time.Minute}, {Limit: 5, Window: time.Second}})
	for _, n := range []int64{0, -1, 6, 1 << 40} {
		d, err := l.AllowN(context.Background(), "k", n)
		if !errors.Is(err, core.ErrInvalidCost) {
			t.Errorf("AllowN(k, %d) error = %v, want ErrInvalidCost", n, err)
		}
		if d.Allowed {
			t.Errorf("AllowN(k, %d) = %s with an error, want a zero Decision", n, show(d))
		}
	}
	if n := st.takes.Load(); n != 0 {
		t.Errorf("invalid costs made %d store calls, want 0", n)
	}
	if d := allowN(t, l, "k", 5); !d.Allowed {
		t.Errorf("AllowN(k, 5) with smallest Limit 5 = %s, want allowed", show(d))
	}
}

func testCanceledContext(t *testing.T, s *suite) {
	l, st := s.limiter(t, []core.Rule{{Limit: 1, Window: time.Minute}})
	c, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Allow(c, "k"); !errors.Is(err, context.Canceled) {
		t.Errorf("Allow with a canceled context: error %v, want context.Canceled", err)
	}
	if _, err := l.Peek(c, "k"); !errors.Is(err, context.Canceled) {
		t.Errorf("Peek with a canceled context: error %v, want context.Canceled", err)
	}
	if n := st.takes.Load(); n != 0 {
		t.Errorf("canceled calls made %d store calls, want 0", n)
	}
	if d := allow(t, l, "k"); !d.Allowed {
		t.Errorf("Allow(k) after canceled calls = %s, want allowed (nothing consumed)", show(d))
	}
}

func testPeek(t *testing.T, s *suite) {
	l, _ := s.limiter(t, []core.Rule{{Limit: 3, Window: time.Minute}})
	for range 5 {
		if d := peek(t, l, "k"); !d.Allowed || d.Remaining != 3 || d.Limit != 3 {
			t.Fatalf("Peek(k) on a fresh key = %s, want allowed, Remaining 3", show(d))
		}
	}
	for i := range 3 {
		if d := allow(t, l, "k"); !d.Allowed || d.Remaining != int64(2-i) {
			t.Fatalf("Allow(k) #%d after 5 Peek = %s, want allowed, Remaining %d", i+1, show(d), 2-i)
		}
	}
	for range 3 {
		d := peek(t, l, "k")
		if d.Allowed || d.Remaining != 0 || d.RetryAfter <= 0 || d.Rules()[0].Used != 3 {
			t.Errorf("Peek(k) on a full key = %s, Used %d; want denied, Remaining 0, RetryAfter > 0, Used 3", show(d), d.Rules()[0].Used)
		}
	}
}

func testReset(t *testing.T, s *suite) {
	l, st := s.limiter(t, []core.Rule{{Limit: 2, Window: time.Minute}})
	allow(t, l, "k")
	allow(t, l, "k")
	allow(t, l, "other")
	if d := allow(t, l, "k"); d.Allowed {
		t.Fatalf("Allow(k) #3 = %s, want denied", show(d))
	}
	// The denial is in the deny cache now, where the limiter keeps one
	// (not on an in-process store, which answers as fast).
	want := core.SourceCache
	if _, local := st.Store.(driver.Local); local {
		want = core.SourceStore
	}
	// A shared store's cache answers once the store listens for
	// invalidations, a moment after the limiter is built.
	d := allow(t, l, "k")
	for try := 0; d.Source != want && want == core.SourceCache && try < 100; try++ {
		time.Sleep(10 * time.Millisecond)
		d = allow(t, l, "k")
	}
	if d.Allowed || d.Source != want {
		t.Fatalf("Allow(k) #4 = %s, want denied by %v", show(d), want)
	}
	if err := l.Reset(ctx(t), "k"); err != nil {
		t.Fatalf("Reset(k): %v", err)
	}
	if d := allow(t, l, "k"); !d.Allowed || d.Remaining != 1 || d.Source != core.SourceStore {
		t.Errorf("Allow(k) after Reset = %s, want allowed by the store, Remaining 1", show(d))
	}
	if d := peek(t, l, "other"); d.Remaining != 1 {
		t.Errorf("Peek(other) after Reset(k) = %s, want Remaining 1 (untouched)", show(d))
	}
	if err := l.Reset(ctx(t), "never-seen"); err != nil {
		t.Errorf("Reset(never-seen) = %v, want nil", err)
	}
}

func testRefund(t *testing.T, s *suite) {
	l, _ := s.limiter(t, []core.Rule{{Limit: 2, Window: time.Minute}})
	d1 := allow(t, l, "k")
	d2 := allow(t, l, "k")
	d3 := allow(t, l, "k")
	if !d1.Allowed || !d2.Allowed || d3.Allowed {
		t.Fatalf("Allow(k) x3 with Limit 2 = %s, %s, %s; want allowed, allowed, denied", show(d1), show(d2), show(d3))
	}
	// A denial recorded nothing: refunding it gives nothing back.
	if err := d3.Refund(ctx(t)); err != nil {
		t.Fatalf("Refund(denied): %v", err)
	}
	if d := allow(t, l, "k"); d.Allowed {
		t.Fatalf("Allow(k) after refunding a denial = %s, want denied", show(d))
	}
	if err := d2.Refund(ctx(t)); err != nil {
		t.Fatalf("Refund(d2): %v", err)
	}
	// The refund also clears the deny cache for the key.
	if d := allow(t, l, "k"); !d.Allowed || d.Source != core.SourceStore || d.Remaining != 0 {
		t.Errorf("Allow(k) after Refund = %s, want allowed by the store, Remaining 0", show(d))
	}
	if d := allow(t, l, "k"); d.Allowed {
		t.Errorf("Allow(k) after the refunded unit was taken again = %s, want denied", show(d))
	}

	// AllowN's units all come back.
	d := allowN(t, l, "n", 2)
	if err := d.Refund(ctx(t)); err != nil {
		t.Fatalf("Refund(AllowN(n, 2)): %v", err)
	}
	if d := peek(t, l, "n"); d.Remaining != 2 || d.Rules()[0].Used != 0 {
		t.Errorf("Peek(n) after refunding AllowN(n, 2) = %s, want Remaining 2", show(d))
	}
}

// testRefundAfterReset: Decision.Refund does nothing for a decision whose
// key was reset since, for every algorithm, with and without a calendar
// rule: the refund must not hand the new window an extra unit.
func testRefundAfterReset(t *testing.T, s *suite) {
	for _, tc := range []struct {
		name  string
		rules []core.Rule
	}{
		{"sliding", []core.Rule{{Limit: 3, Window: time.Minute}}},
		{"calendar", []core.Rule{{Limit: 3, Calendar: core.Day}}},
		{"both", []core.Rule{{Limit: 3, Window: time.Minute}, {Limit: 5, Calendar: core.Day}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			algorithms(t, func(t *testing.T, algo core.Algorithm) {
				l, _ := s.policyLimiter(t, core.Policy{Rules: tc.rules, Algorithm: algo})
				kept := allow(t, l, "k")
				if !kept.Allowed {
					t.Fatalf("Allow(k) = %s, want allowed", show(kept))
				}
				if err := l.Reset(ctx(t), "k"); err != nil {
					t.Fatal(err)
				}
				for i := range 3 {
					if d := allow(t, l, "k"); !d.Allowed {
						t.Fatalf("Allow(k) #%d after Reset = %s, want allowed", i+1, show(d))
					}
				}
				if err := kept.Refund(ctx(t)); err != nil {
					t.Fatal(err)
				}
				if d := allow(t, l, "k"); d.Allowed {
					t.Errorf("Allow(k) after refunding a decision made before the Reset = %s, want denied: 4 units against a limit of 3", show(d))
				}
			})
		})
	}
}

// testNextAfter: a rule's NextAfter is when the oldest units of its
// window leave it (the draft's example: 39 units at 0 s and 1 at 2 s of
// 100 per 60 s are freed in 58 s), the RetryAfter of a rule that denies
// one unit, and 0 for an empty window. Under SlidingBuckets a unit leaves
// when its whole bucket (Window/60 wide) has.
func testNextAfter(t *testing.T, s *suite) {
	algorithms(t, func(t *testing.T, algo core.Algorithm) {
		start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
		clk := NewClock(start)
		leaves := unitLeaves(algo, clk)
		minute, ten := time.Minute, 10*time.Second
		l, _ := s.policyLimiter(t, core.Policy{Algorithm: algo, Rules: []core.Rule{{Limit: 100, Window: minute}}},
			core.WithClock(clk.Now))
		if d := allowN(t, l, "k", 39); d.Rules()[0].NextAfter != leaves(start, minute) {
			t.Errorf("39 units: NextAfter %v, want %v (the units themselves leave)", d.Rules()[0].NextAfter, leaves(start, minute))
		}
		if d := peek(t, l, "fresh"); d.Rules()[0].NextAfter != 0 {
			t.Errorf("empty window: NextAfter %v, want 0", d.Rules()[0].NextAfter)
		}
		clk.Add(2 * time.Second)
		if d := allow(t, l, "k"); d.Remaining != 60 || d.Rules()[0].NextAfter != leaves(start, minute) {
			t.Errorf("1 unit at 2 s: Remaining %d, NextAfter %v; want 60, %v", d.Remaining, d.Rules()[0].NextAfter, leaves(start, minute))
		}
		clk.Set(start)
		l2, _ := s.policyLimiter(t, core.Policy{Algorithm: algo,
			Rules: []core.Rule{{Limit: 100, Window: minute}, {Limit: 2, Window: ten}}},
			core.WithClock(clk.Now))
		allow(t, l2, "k")
		clk.Add(2 * time.Second)
		at2 := clk.Now()
		d := allow(t, l2, "k")
		r := d.Rules()
		if r[0].NextAfter != leaves(start, minute) || r[0].ResetAfter != leaves(at2, minute) {
			t.Errorf("at 2 s: NextAfter %v, ResetAfter %v; want %v, %v", r[0].NextAfter, r[0].ResetAfter,
				leaves(start, minute), leaves(at2, minute))
		}
		if r[1].NextAfter != leaves(start, ten) || r[1].ResetAfter != leaves(at2, ten) {
			t.Errorf("at 2 s, 10 s rule: NextAfter %v, ResetAfter %v; want %v, %v", r[1].NextAfter, r[1].ResetAfter,
				leaves(start, ten), leaves(at2, ten))
		}
		clk.Add(time.Second)
		d = allow(t, l2, "k") // denied by the 10 s rule
		if r := d.Rules()[1]; d.Allowed || r.NextAfter != leaves(start, ten) || r.RetryAfter != r.NextAfter {
			t.Errorf("at 3 s: %s, NextAfter %v; want denied, RetryAfter and NextAfter %v", show(d), r.NextAfter, leaves(start, ten))
		}

		checkNextAfterLongWindow(t, s, algo, clk, start)
	})
}

// unitLeaves returns leaves for algo: when a unit admitted at a leaves
// window w, seen at clk's now.
func unitLeaves(algo core.Algorithm, clk *Clock) func(a time.Time, w time.Duration) time.Duration {
	return func(a time.Time, w time.Duration) time.Duration {
		if algo == core.SlidingBuckets {
			g := w.Microseconds() / 60
			return time.Duration((a.UnixMicro()/g+1)*g+w.Microseconds()-clk.Now().UnixMicro()) * time.Microsecond
		}
		return a.Add(w).Sub(clk.Now())
	}
}

// checkNextAfterLongWindow is testNextAfter's long window: a store that
// reads only part of it (the Lua reads a long log around its hints) still
// finds the oldest unit. It sets clk back to start first.
func checkNextAfterLongWindow(t *testing.T, s *suite, algo core.Algorithm, clk *Clock, start time.Time) {
	t.Helper()
	leaves := unitLeaves(algo, clk)
	minute := time.Minute
	clk.Set(start)
	long, _ := s.policyLimiter(t, core.Policy{Algorithm: algo, Rules: []core.Rule{{Limit: 1000, Window: minute}}},
		core.WithClock(clk.Now))
	for range 200 { // one unit every 100 ms, from 0 s to 19.9 s
		allow(t, long, "k")
		clk.Add(100 * time.Millisecond)
	}
	for _, tc := range []struct{ at, oldest time.Duration }{
		{30 * time.Second, 0},
		{60*time.Second + 50*time.Millisecond, 100 * time.Millisecond},
		{75*time.Second + 20*time.Millisecond, 15100 * time.Millisecond},
	} {
		clk.Set(start.Add(tc.at))
		if d := allow(t, long, "k"); d.Rules()[0].NextAfter != leaves(start.Add(tc.oldest), minute) {
			t.Errorf("long window at %v: NextAfter %v, want %v (the unit of %v)", tc.at, d.Rules()[0].NextAfter,
				leaves(start.Add(tc.oldest), minute), tc.oldest)
		}
	}
}

func testIsolation(t *testing.T, s *suite) {
	st := s.store(t)
	rules := []core.Rule{{Limit: 1, Window: time.Minute}}
	a, err := core.NewLimiter(spied(st), core.Policy{Name: s.name(), Rules: rules}, s.options()...)
	if err != nil {
		t.Fatal(err)
	}
	b, err := core.NewLimiter(spied(st), core.Policy{Name: s.name(), Rules: rules}, s.options()...)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		l    *core.Limiter
		key  string
		want bool
	}{
		{"a/k", a, "k", true},
		{"a/k again", a, "k", false},
		{"a/K (case differs)", a, "K", true},
		{"a/k2", a, "k2", true},
		{"b/k (other policy)", b, "k", true},
		{"b/k again", b, "k", false},
	} {
		if d := allow(t, tc.l, tc.key); d.Allowed != tc.want {
			t.Errorf("%s: Allow(%q) = %s, want Allowed=%v", tc.name, tc.key, show(d), tc.want)
		}
	}
}

func testValidation(t *testing.T, s *suite) {
	st := s.newStore(t)
	ok := []core.Rule{{Limit: 1, Window: time.Second}}
	many := make([]core.Rule, 17)
	for i := range many {
		many[i] = core.Rule{Limit: int64(i + 1), Window: time.Duration(i+1) * time.Second}
	}
	checkInvalidPolicies(t, st, ok, many)
	checkValidEdges(t, st, ok, many[:16])

	// A store called without a limiter refuses a period it cannot count.
	q := driver.Query{Policy: s.name(), Key: "k", N: 1, Rules: []driver.Rule{{Limit: 1, Calendar: 9}}}
	if _, err := st.Take(ctx(t), q); !errors.Is(err, driver.ErrInvalidQuery) {
		t.Errorf("Take with Calendar 9 = %v, want driver.ErrInvalidQuery", err)
	}

	// The limiter keeps its own copy of the rules.
	rules := []core.Rule{{Limit: 1, Window: time.Minute}}
	l, err := core.NewLimiter(st, core.Policy{Name: s.name(), Rules: rules}, s.options()...)
	if err != nil {
		t.Fatal(err)
	}
	rules[0].Limit = 100
	l.Policy().Rules[0].Limit = 100
	if got := l.Policy().Rules[0].Limit; got != 1 {
		t.Errorf("Policy().Rules[0].Limit after changing the caller's slices = %d, want 1", got)
	}
	allow(t, l, "k")
	if d := allow(t, l, "k"); d.Allowed {
		t.Errorf("Allow #2 with Limit 1 = %s, want denied", show(d))
	}
}

// invalidPolicy is a case of checkInvalidPolicies: NewLimiter(store,
// policy, opts...) fails with an error that names wantField.
type invalidPolicy struct {
	name      string
	store     core.Store
	policy    core.Policy
	opts      []core.Option
	wantField string
}

// checkInvalidPolicies checks that NewLimiter refuses each invalid policy
// and option on st with ErrInvalidPolicy, naming the field at fault. ok is
// a valid rule, many 17 rules.
func checkInvalidPolicies(t *testing.T, st core.Store, ok, many []core.Rule) {
	t.Helper()
	for _, tc := range []invalidPolicy{
		{"nil store", nil, core.Policy{Name: "p", Rules: ok}, nil, "store"},
		{"empty name", st, core.Policy{Rules: ok}, nil, "Name"},
		{"name with brace", st, core.Policy{Name: "a{b", Rules: ok}, nil, "Name"},
		{"name with space", st, core.Policy{Name: "a b", Rules: ok}, nil, "Name"},
		{"name too long", st, core.Policy{Name: strings.Repeat("n", 65), Rules: ok}, nil, "Name"},
		{"no rules", st, core.Policy{Name: "p"}, nil, "Rules"},
		{"17 rules", st, core.Policy{Name: "p", Rules: many}, nil, "Rules"},
		{"zero limit", st, core.Policy{Name: "p", Rules: []core.Rule{{Limit: 0, Window: time.Second}}}, nil, "Limit"},
		{"negative limit", st, core.Policy{Name: "p", Rules: []core.Rule{{Limit: -1, Window: time.Second}}}, nil, "Limit"},
		{"zero window", st, core.Policy{Name: "p", Rules: []core.Rule{{Limit: 1}}}, nil, "Window"},
		{"sub-millisecond window", st, core.Policy{Name: "p", Rules: []core.Rule{{Limit: 1, Window: 999 * time.Microsecond}}}, nil, "Window"},
		{"window with nanoseconds", st, core.Policy{Name: "p", Rules: []core.Rule{{Limit: 1, Window: time.Second + 1}}}, nil, "Window"},
		{"second rule bad", st, core.Policy{Name: "p", Rules: []core.Rule{{Limit: 1, Window: time.Second}, {Limit: 0, Window: time.Minute}}}, nil, "Rules[1].Limit"},
		{"duplicate rule", st, core.Policy{Name: "p", Rules: []core.Rule{{Limit: 1, Window: time.Second}, {Limit: 1, Window: time.Second}}}, nil, "Rules[1]"},
		{"two rules of one window", st, core.Policy{Name: "p", Rules: []core.Rule{{Limit: 1, Window: time.Second}, {Limit: 2, Window: time.Second}}}, nil, "Rules[1]"},
		{"unknown algorithm", st, core.Policy{Name: "p", Rules: ok, Algorithm: 7}, nil, "Algorithm"},
		{"zero timeout", st, core.Policy{Name: "p", Rules: ok}, []core.Option{core.WithTimeout(0)}, "WithTimeout"},
		{"unknown failure policy", st, core.Policy{Name: "p", Rules: ok}, []core.Option{core.WithFailurePolicy(9)}, "WithFailurePolicy"},
		{"negative deny cache", st, core.Policy{Name: "p", Rules: ok}, []core.Option{core.WithDenyCache(-1)}, "WithDenyCache"},
		{"negative breaker", st, core.Policy{Name: "p", Rules: ok}, []core.Option{core.WithBreaker(-1, time.Second)}, "WithBreaker"},
		{"breaker without cooldown", st, core.Policy{Name: "p", Rules: ok}, []core.Option{core.WithBreaker(3, 0)}, "WithBreaker"},
		{"calendar with a window", st, core.Policy{Name: "p", Rules: []core.Rule{{Limit: 1, Window: time.Hour, Calendar: core.Day}}}, nil, "Rules[0].Window"},
		{"unknown calendar", st, core.Policy{Name: "p", Rules: []core.Rule{{Limit: 1, Calendar: 9}}}, nil, "Rules[0].Calendar"},
		{"calendar without limit", st, core.Policy{Name: "p", Rules: []core.Rule{{Calendar: core.Month}}}, nil, "Rules[0].Limit"},
		{"two rules of one period", st, core.Policy{Name: "p", Rules: []core.Rule{{Limit: 5, Calendar: core.Month}, {Limit: 9, Calendar: core.Month, Location: time.Local}}}, nil, "Rules[1]"},
		{"location without calendar", st, core.Policy{Name: "p", Rules: []core.Rule{{Limit: 1, Window: time.Hour, Location: time.UTC}}}, nil, "Rules[0].Location"},
		{"negative lockout", st, core.Policy{Name: "p", Rules: ok, Lockout: core.Lockout{For: -time.Second}}, nil, "Lockout.For"},
		{"lockout under a millisecond", st, core.Policy{Name: "p", Rules: ok, Lockout: core.Lockout{For: time.Microsecond}}, nil, "Lockout.For"},
		{"lockout max without for", st, core.Policy{Name: "p", Rules: ok, Lockout: core.Lockout{Max: time.Hour}}, nil, "Lockout.For"},
		{"lockout max below for", st, core.Policy{Name: "p", Rules: ok, Lockout: core.Lockout{For: time.Hour, Max: time.Minute}}, nil, "Lockout.Max"},
		{"lockout with shards", st, core.Policy{Name: "p", Rules: []core.Rule{{Limit: 4, Window: time.Second}}, Shards: 2, Lockout: core.Lockout{For: time.Hour}}, nil, "Lockout"},
		{"challenge at the limit", st, core.Policy{Name: "p", Rules: []core.Rule{{Limit: 3, Window: time.Second, Challenge: 3}}}, nil, "Rules[0].Challenge must be below Limit"},
		{"negative challenge", st, core.Policy{Name: "p", Rules: []core.Rule{{Limit: 3, Window: time.Second, Challenge: -1}}}, nil, "Rules[0].Challenge"},
		{"second rule's challenge", st, core.Policy{Name: "p", Rules: []core.Rule{{Limit: 3, Window: time.Second}, {Limit: 5, Calendar: core.Day, Challenge: 9}}}, nil, "Rules[1].Challenge"},
		{"challenge with shards", st, core.Policy{Name: "p", Rules: []core.Rule{{Limit: 4, Window: time.Second, Challenge: 2}}, Shards: 2}, nil, "Challenge"},
		{"challenge on a store without challenges", struct{ core.Store }{st}, core.Policy{Name: "p", Rules: []core.Rule{{Limit: 4, Window: time.Second, Challenge: 2}}}, nil, "driver.Challenges"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := core.NewLimiter(tc.store, tc.policy, tc.opts...)
			if !errors.Is(err, core.ErrInvalidPolicy) {
				t.Fatalf("NewLimiter(%+v) = %v, %v; want ErrInvalidPolicy", tc.policy, l, err)
			}
			if l != nil {
				t.Errorf("NewLimiter(%+v) returned a limiter with an error", tc.policy)
			}
			if !strings.Contains(err.Error(), tc.wantField) {
				t.Errorf("NewLimiter(%+v) error %q does not name %s", tc.policy, err, tc.wantField)
			}
		})
	}
}

// checkValidEdges checks that NewLimiter accepts the edges that are valid
// on st. ok is a valid rule, sixteen 16 rules.
func checkValidEdges(t *testing.T, st core.Store, ok, sixteen []core.Rule) {
	t.Helper()
	for _, p := range []core.Policy{
		{Name: strings.Repeat("n", 64), Rules: ok},
		{Name: "p", Rules: sixteen},
		{Name: "p", Rules: []core.Rule{{Limit: 1, Window: time.Millisecond}}},
		{Name: "p", Rules: []core.Rule{{Limit: 1, Window: time.Second + time.Microsecond}}},
		// A calendar rule keeps a count, not an entry per unit: any limit.
		{Name: "p", Rules: []core.Rule{{Limit: 10, Window: time.Second}, {Limit: 1_000_000, Calendar: core.Month}, {Limit: 50_000, Calendar: core.Day, Location: time.Local}}},
		{Name: "p", Rules: ok, Lockout: core.Lockout{For: time.Millisecond}},
		{Name: "p", Rules: ok, Lockout: core.Lockout{For: time.Hour, Max: time.Hour}},
		{Name: "p", Rules: []core.Rule{{Limit: 2, Window: time.Second, Challenge: 1}, {Limit: 9, Calendar: core.Day, Challenge: 8}}},
	} {
		if _, err := core.NewLimiter(st, p); err != nil {
			t.Errorf("NewLimiter(%+v) = %v, want a limiter", p, err)
		}
	}
}

// maxStoreKey is the longest key a limiter hands its store as it is;
// longer keys are replaced by hashedKey (see driver.Query.Key).
const maxStoreKey = 128

// hashedKey is the store key of a key longer than maxStoreKey: "#" and the
// base64url SHA-256 of the key.
func hashedKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "#" + base64.RawURLEncoding.EncodeToString(sum[:])
}

func testLongKeys(t *testing.T, s *suite) {
	l, st := s.limiter(t, []core.Rule{{Limit: 1, Window: time.Minute}})
	base := strings.Repeat("k", 100<<10)
	k1, k2 := base+"1", base+"2"
	for _, tc := range []struct {
		name, key string
		want      bool
	}{
		{"k1", k1, true},
		{"k2 (same 100 KB prefix)", k2, true},
		{"k1 again", k1, false},
		{"k2 again", k2, false},
	} {
		if d := allow(t, l, tc.key); d.Allowed != tc.want {
			t.Errorf("%s: Allow(%d-byte key) = %s, want Allowed=%v", tc.name, len(tc.key), show(d), tc.want)
		}
	}
	if got := st.maxKey.Load(); got > maxStoreKey {
		t.Errorf("the store saw a %d-byte key, want at most MaxKeyLen = %d", got, maxStoreKey)
	}
	// Keys up to MaxKeyLen reach the store as they are.
	exact := strings.Repeat("e", maxStoreKey)
	allow(t, l, exact)
	if !st.sawKey(exact) {
		t.Errorf("a %d-byte key did not reach the store unchanged", len(exact))
	}
	over := exact + "x"
	allow(t, l, over)
	if st.sawKey(over) || !st.sawKey(hashedKey(over)) {
		t.Errorf("a %d-byte key reached the store unhashed", len(over))
	}
	if d := peek(t, l, k1); d.Allowed {
		t.Errorf("Peek(k1) = %s, want denied (Peek bounds keys as Allow does)", show(d))
	}
	if err := l.Reset(ctx(t), k1); err != nil {
		t.Fatal(err)
	}
	d := allow(t, l, k1)
	if !d.Allowed {
		t.Errorf("Allow(k1) after Reset(k1) = %s, want allowed (Reset bounds keys as Allow does)", show(d))
	}
	if err := d.Refund(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if d := allow(t, l, k1); !d.Allowed {
		t.Errorf("Allow(k1) after Refund = %s, want allowed (Refund finds the bounded key)", show(d))
	}
	if got := st.maxKey.Load(); got > maxStoreKey {
		t.Errorf("the store saw a %d-byte key in Peek, Reset or Refund, want at most %d", got, maxStoreKey)
	}
}

func testWindowExpiry(t *testing.T, s *suite) {
	const window = 150 * time.Millisecond
	l, _ := s.limiter(t, []core.Rule{{Limit: 2, Window: window}})
	retryTiming(t, func(key string) bool {
		for round := range 2 {
			b := time.Now()
			allow(t, l, key)
			allow(t, l, key)
			d := allow(t, l, key)
			if d.Allowed && time.Since(b) >= window {
				return false
			}
			if d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > window {
				t.Fatalf("round %d: Allow(%s) #3 = %s, want denied with RetryAfter in (0, %v]", round, key, show(d), window)
			}
			// Wait until every unit has left the window: the key must be
			// as new, from the store (the deny cache must not outlive it).
			time.Sleep(d.ResetAfter + 2*time.Millisecond)
			d = allow(t, l, key)
			if !d.Allowed || d.Remaining != 1 || d.Source != core.SourceStore {
				t.Fatalf("round %d: Allow(%s) after the window passed = %s, want allowed by the store, Remaining 1", round, key, show(d))
			}
			if err := l.Reset(ctx(t), key); err != nil {
				t.Fatal(err)
			}
		}
		return true
	})
}

// retryTiming runs a scenario that depends on calls taking less than a
// window, on a fresh key each time, until it reports that its timing held
// (true). A scenario returns false only when this process stalled longer
// than a window, which makes its outcome right but uninformative; three
// such stalls in a row fail the test.
func retryTiming(t *testing.T, scenario func(key string) bool) {
	t.Helper()
	for attempt := 1; attempt <= 3; attempt++ {
		if scenario(fmt.Sprintf("k%d", attempt)) || t.Failed() {
			return
		}
		t.Logf("attempt %d: stalled longer than a window; trying again", attempt)
	}
	t.Fatal("3 attempts stalled longer than a window: the machine is too loaded for this test")
}
