package core

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"time"
)

// DefaultTimeout bounds every store call unless [WithTimeout] sets another.
const DefaultTimeout = 20 * time.Millisecond

// FailurePolicy says how a [Limiter] decides when its store fails or times
// out.
type FailurePolicy uint8

const (
	// FailLocal decides with an in-process [MemoryStore] for the same
	// policy, so the service stays up and each instance stays protected.
	// It is the default.
	FailLocal FailurePolicy = iota
	// FailOpen admits every request while the store fails.
	FailOpen
	// FailClosed denies every request while the store fails; adapters
	// answer 503 Service Unavailable, not 429.
	FailClosed
)

// String returns the policy's name.
func (p FailurePolicy) String() string {
	switch p {
	case FailLocal:
		return "FailLocal"
	case FailOpen:
		return "FailOpen"
	case FailClosed:
		return "FailClosed"
	}
	return fmt.Sprintf("FailurePolicy(%d)", int(p))
}

// Option configures a [Limiter].
type Option func(*options)

type options struct {
	timeout       time.Duration
	failure       FailurePolicy
	observer      Observer
	denyCacheSize int
	breakerFails  int
	breakerCool   time.Duration
	tierFunc      TierFunc
	tiers         map[string][]Rule
	tierCacheSize int
	tierCacheTTL  time.Duration
	clock         func() time.Time
	keep          int64 // the largest limit of every tier (set by the tiers' parent)
	wholeLimit    bool  // WithLocalShare(false)
	tier          bool  // a tier's limiter: its parent counts its refusals
	refusedEvery  time.Duration
	noRefusals    bool // count no refusals (tests, benchmarks)
}

// fallbackMaxKeys bounds the local store of FailLocal.
const fallbackMaxKeys = 100_000

// WithTimeout bounds every store call; 20 ms ([DefaultTimeout]) by default.
// It must be positive. The bound holds whatever the go-redis client's own
// options are.
//
// The timeout means that the store did not answer, not that this process
// was too busy to read an answer that came: when the timeout falls due
// while the process is starved of CPU (the timeout noticed late by an
// eighth of the timeout or more, or the Go scheduler busy: every P
// running with goroutines waiting, or slow by that much to run a
// goroutine that yields, now or for any call in the last 100 ms), the
// call waits on, twice as long as the process was held up, and is judged
// anew, up to a second past the timeout. A login server whose CPU an attack of
// password guesses saturates thus stays exact on a healthy Redis, while
// a Redis that is paused, stopped or cut off costs a responsive process
// no more than the timeout.
func WithTimeout(d time.Duration) Option {
	return func(o *options) { o.timeout = d }
}

// WithFailurePolicy says how to decide when the store fails or times out;
// [FailLocal] by default.
func WithFailurePolicy(p FailurePolicy) Option {
	return func(o *options) { o.failure = p }
}

// WithObserver adds an observer of the limiter: every decision, store
// failure, breaker change and failed [Limiter.Check]. Several observers
// are called in order. What only a middleware knows (skipped requests,
// bad keys, denials let through in dry-run mode) goes to the middleware's
// own observer instead, so one observer given to both sees every event
// once.
func WithObserver(obs Observer) Option {
	return func(o *options) { o.observer = join(o.observer, obs) }
}

// WithDenyCache sets how many denied keys the limiter remembers locally;
// 10,000 by default, 0 turns the cache off. When it is full, expired
// denials, or else those that answered the fewest requests (then those
// that end soonest), make room: a flood of keys denied once each does not
// push out the keys that flood the limiter most.
// A key denied with RetryAfter r cannot be admitted before r passes, so
// until then a flood from it is answered without a store call. The cache
// never admits: it only answers denials that the store would give as
// well. A limiter on a [MemoryStore] has no deny cache: the store answers
// as fast. Nor has a limiter of an InFlight policy: its units free
// whenever a request ends.
func WithDenyCache(size int) Option {
	return func(o *options) { o.denyCacheSize = size }
}

// WithBreaker sets the circuit breaker: after failures consecutive store
// failures, the limiter stops calling the store for cooldown and decides
// by its failure policy at once; then one probe call at a time tests the
// store. The default is 5 failures and 1 s; failures 0 turns it off. The
// failure of one key (a key holding a value of another type) does not
// count. On a store spread over servers ([Partitioned]) each partition
// has a breaker of its own: on a Redis Cluster, with either Redis driver,
// each master (by the slot of the key's hash tag, as Redis places it), so
// that one failing master switches only its own keys to the failure
// policy.
func WithBreaker(failures int, cooldown time.Duration) Option {
	return func(o *options) {
		o.breakerFails = failures
		o.breakerCool = cooldown
	}
}

// WithClock makes the limiter read the time of its decisions from clock
// instead of the store's own clock (the Redis server's TIME, or the
// process's monotonic clock for a [MemoryStore]). Tests use it to step
// time exactly. With a Redis store every app instance then writes its own
// clock's times, so the windows are only as exact as the instances'
// clocks agree: leave it unset in production. Keys still expire by the
// Redis server's clock: each write extends a key's TTL by how far clock
// runs behind the server's, so no entry expires while it counts in
// clock's time (a clock ahead of the server's only keeps keys longer).
func WithClock(clock func() time.Time) Option {
	return func(o *options) { o.clock = clock }
}

// Limiter decides whether requests of one [Policy] are admitted, key by
// key. Build one per policy at start-up and share it: a Limiter is safe for
// concurrent use.
type Limiter struct {
	store    Store
	d        decider // how the limiter decides, chosen when it is built
	policy   Policy
	keep     int64 // Query.Keep
	minLimit int64
	timeout  time.Duration
	failure  FailurePolicy
	local    *MemoryStore // FailLocal's fallback store, on a shared store
	mem      *memPolicy   // the policy's keys, when store is a *MemoryStore
	observer Observer
	deny     *denyCache
	breakers breakers
	tiers    *tierSet
	shards   *shardSet  // nil unless Policy.Shards > 1
	passes   Challenges // the store, when a rule has a Challenge
	clock    func() time.Time
	waits    waitQueues // callers of WaitN
	released releases   // wakes them when a lease is released (InFlight)

	fleet      func() int // the instances using the policy, on a Fleet store
	wholeLimit bool       // WithLocalShare(false)
	fb         fallbackState
	refused    *refusals // the refusals counted (TopRefused); nil: none
}

// decider is how a Limiter decides, chosen when it is built: rates on a
// Local store, rates on a shared store, or leases (Policy.InFlight). Keys
// are bounded; shard is the key's shard, with shards.
type decider interface {
	allow(ctx context.Context, key string, shard int, n int64) (Decision, error)
	peek(ctx context.Context, key string, shard int) (Decision, error)
	refund(ctx context.Context, t ticket) error
	reset(ctx context.Context, key string, shard int) error
}

// NewLimiter returns a limiter for policy on store. It returns an error
// wrapping [ErrInvalidPolicy], naming the field, when the policy or an
// option cannot work, or when the store lacks a capability the policy
// needs (an InFlight policy needs [Leases], a rule with a Challenge
// [Challenges]).
func NewLimiter(store Store, policy Policy, opts ...Option) (*Limiter, error) {
	if store == nil {
		return nil, fmt.Errorf("ratekit: NewLimiter: store is nil: %w", ErrInvalidPolicy)
	}
	if err := policy.Validate(); err != nil {
		return nil, err
	}
	o, err := newOptions(policy.Name, opts)
	if err != nil {
		return nil, err
	}
	policy.Rules = append([]Rule(nil), policy.Rules...)
	l := &Limiter{
		store:      store,
		policy:     policy,
		keep:       max(o.keep, policy.maxLimit()),
		minLimit:   policy.minLimit(),
		timeout:    o.timeout,
		failure:    o.failure,
		observer:   o.observer,
		shards:     newShardSet(policy),
		clock:      o.clock,
		wholeLimit: o.wholeLimit,
	}
	if hasChallenge(policy.Rules) {
		if l.passes, err = challengesOf(store, policy.Name); err != nil {
			return nil, err
		}
	}
	l.breakers.init(store, o)
	if !o.tier && !o.noRefusals {
		l.refused = newRefusals(policy, store, o.refusedEvery)
	}
	_, local := store.(Local)
	if !local && o.failure == FailLocal {
		l.local = NewMemoryStore(WithMaxKeys(fallbackMaxKeys))
		if f, ok := store.(Fleet); ok && !o.wholeLimit {
			l.fleet = f.Join(policy.Name)
		}
	}
	if policy.InFlight > 0 {
		return l, l.inFlight(o, local)
	}
	inv, _ := store.(Invalidator)
	if local {
		l.d = localRates{l}
		l.mem = memPolicyOf(store, policy.Name)
	} else {
		l.d = sharedRates{l}
		if o.denyCacheSize > 0 && inv != nil {
			l.deny = newDenyCache(o.denyCacheSize)
		}
	}
	if o.tierFunc != nil || o.tiers != nil {
		if l.tiers, err = newTiers(store, policy, o, opts); err != nil {
			return nil, err
		}
		for _, t := range l.tiers.by {
			t.refused = l.refused
		}
	}
	l.countRefusals()
	if inv != nil && !local && (l.deny != nil || l.local != nil || l.tiers != nil && l.tiers.cache != nil) {
		inv.Watch(policy.Name, l.invalidate)
	}
	return l, nil
}

// challengesOf returns store's challenges, for a policy with a
// Rules[].Challenge, or an error naming what the store lacks.
func challengesOf(store Store, policy string) (Challenges, error) {
	c, ok := store.(Challenges)
	if !ok {
		return nil, fmt.Errorf("ratekit: policy %q has a Rules[].Challenge, but store %T keeps no challenges (core.Challenges): %w",
			policy, store, ErrInvalidPolicy)
	}
	return c, nil
}

// countRefusals has the deny caches of l and of its tiers count the
// refusals they answer into l's refusals, when l counts them.
func (l *Limiter) countRefusals() {
	if l.refused == nil {
		return
	}
	all := []*Limiter{l}
	if l.tiers != nil {
		for _, t := range l.tiers.by {
			all = append(all, t)
		}
	}
	for _, t := range all {
		if t.deny != nil {
			t.deny.refused = l.refused
			l.refused.caches = append(l.refused.caches, t.deny)
		}
	}
}

// newOptions returns the options opts set, over the defaults, checked.
func newOptions(policy string, opts []Option) (options, error) {
	o := options{
		timeout:       DefaultTimeout,
		denyCacheSize: 10000,
		breakerFails:  5,
		breakerCool:   time.Second,
		tierCacheSize: 10000,
		tierCacheTTL:  time.Minute,
		refusedEvery:  refusedEvery,
	}
	for _, opt := range opts {
		opt(&o)
	}
	switch {
	case o.timeout <= 0:
		return o, fmt.Errorf("ratekit: policy %q: WithTimeout %v must be positive: %w", policy, o.timeout, ErrInvalidPolicy)
	case o.failure > FailClosed:
		return o, fmt.Errorf("ratekit: policy %q: WithFailurePolicy: unknown %v: %w", policy, o.failure, ErrInvalidPolicy)
	case o.denyCacheSize < 0:
		return o, fmt.Errorf("ratekit: policy %q: WithDenyCache size %d must not be negative: %w", policy, o.denyCacheSize, ErrInvalidPolicy)
	case o.breakerFails < 0:
		return o, fmt.Errorf("ratekit: policy %q: WithBreaker failures %d must not be negative: %w", policy, o.breakerFails, ErrInvalidPolicy)
	case o.refusedEvery <= 0:
		return o, fmt.Errorf("ratekit: policy %q: refusals flushed every %v: must be positive: %w", policy, o.refusedEvery, ErrInvalidPolicy)
	case o.breakerFails > 0 && o.breakerCool <= 0:
		return o, fmt.Errorf("ratekit: policy %q: WithBreaker cooldown %v must be positive: %w", policy, o.breakerCool, ErrInvalidPolicy)
	}
	return o, nil
}

// invalidate acts on what the store reports from any instance (see
// [Invalidator]).
func (l *Limiter) invalidate(inv Invalidation) {
	switch {
	case inv.Resync:
		if l.deny != nil {
			l.deny.resync()
		}
		if l.tiers != nil {
			l.tiers.forgetAll()
		}
	case inv.Tier:
		if l.tiers != nil {
			l.tiers.forget(inv.Key)
		}
	default:
		if l.deny != nil {
			l.deny.remove(inv.Key)
		}
		if l.local != nil {
			// A lockout lifted elsewhere no longer holds in this
			// instance's fallback either, nor a pass forgotten there.
			l.local.policy(l.policy.Name).lift(inv.Key)
		}
	}
}

// Policy returns a copy of the limiter's policy.
func (l *Limiter) Policy() Policy {
	p := l.policy
	p.Rules = append([]Rule(nil), p.Rules...)
	return p
}

// Allow is AllowN(ctx, key, 1).
func (l *Limiter) Allow(ctx context.Context, key string) (Decision, error) {
	return l.AllowN(ctx, key, 1)
}

// AllowN decides whether n units for key fit every rule of the policy now
// and, if so, records them.
//
// A store failure is not an error: the failure policy decides, and the
// Decision's Source says so; the failure goes to the observers. AllowN
// returns an error only when n is invalid (wrapping [ErrInvalidCost]: n
// below 1, or above the smallest limit of the key's rules, so that it
// could never fit) or ctx is done (wrapping ctx.Err()).
func (l *Limiter) AllowN(ctx context.Context, key string, n int64) (d Decision, _ error) {
	if l.tiers != nil {
		if t := l.tiers.pick(ctx, key, boundKey(key)); t != nil {
			return t.AllowN(ctx, key, n)
		}
	}
	if n < 1 || n > l.minLimit {
		return Decision{}, fmt.Errorf("ratekit: policy %q: cost %d outside 1..%d: %w", l.policy.Name, n, l.minLimit, ErrInvalidCost)
	}
	if err := ctx.Err(); err != nil {
		return Decision{}, fmt.Errorf("ratekit: policy %q: %w", l.policy.Name, err)
	}
	key, shard := l.shards.pick(boundKey(key))
	if l.mem != nil {
		l.allowMem(ctx, key, shard, n, &d) // into the result: no copy
		return d, nil
	}
	return l.d.allow(ctx, key, shard, n)
}

// Peek reports the decision a request of one unit for key would get now,
// consuming nothing. A peek is not a decision: observers do not see it,
// and a store failure it meets does not count toward the circuit breaker.
// Errors are as for [Limiter.AllowN].
func (l *Limiter) Peek(ctx context.Context, key string) (Decision, error) {
	if err := ctx.Err(); err != nil {
		return Decision{}, fmt.Errorf("ratekit: policy %q: %w", l.policy.Name, err)
	}
	if l.tiers != nil {
		if t := l.tiers.pick(ctx, key, boundKey(key)); t != nil {
			return t.Peek(ctx, key)
		}
	}
	key, shard := l.shards.peek(boundKey(key))
	return l.d.peek(ctx, key, shard)
}

// now returns the time of a decision by the limiter's clock.
func (l *Limiter) now() time.Time {
	if l.clock != nil {
		return l.clock()
	}
	return time.Now()
}

// stamp returns the time of a decision that the store times by its own
// clock unless WithClock gives one: the clock's time, or the zero time
// (no clock is read: the store reads its own).
func (l *Limiter) stamp() time.Time {
	if l.clock != nil {
		return l.clock()
	}
	return time.Time{}
}

// query returns the store query for a bounded key (shard's, with shards)
// decided at now; the zero now for refunds and resets.
func (l *Limiter) query(key string, shard int, n int64, now time.Time) Query {
	var q Query
	l.setQuery(&q, key, shard, n, now)
	return q
}

// setQuery sets *q, which is zero, to query(key, shard, n, now), field
// by field: the decisions of a MemoryStore build theirs where they use
// it.
func (l *Limiter) setQuery(q *Query, key string, shard int, n int64, now time.Time) {
	q.Policy, q.Key, q.Rules = l.policy.Name, key, l.shards.rules(shard, l.policy.Rules)
	q.Algorithm, q.Buckets, q.N, q.Keep, q.Lockout = l.policy.Algorithm, l.policy.buckets(), n, l.keep, l.policy.Lockout
	if l.clock != nil && !now.IsZero() {
		q.Now = now.UnixMicro()
	}
}

// Refund gives back the units the decision recorded, as if the request had
// not been made: "count only failures" reserves a unit before the handler
// and refunds it when the request turns out not to count. It does nothing
// for a denial, for a fallback admission that recorded nothing, and for a
// decision already refunded or whose key was reset since, under every
// algorithm and calendar rule: the key's windows are then new, and the
// refund must not add room to them. (Under WithClock, "since" is read on
// the instances' clocks, which must then agree.) The error wraps the
// store's; the units then stay counted, which can only under-admit.
//
// Under an InFlight policy the units are a lease held while the request
// runs, and Refund releases it: call it when the request ends, whatever
// its outcome (the guard's adapters do, after the handler). Releasing is
// exact: a lease is released once, however often Refund is called on the
// decision or its copies. A release that fails is retried in the
// background until it succeeds or the lease expires (Policy.LeaseTTL).
func (d *Decision) Refund(ctx context.Context) error {
	t := d.ticket
	if !d.Allowed || t.owner == nil {
		return nil
	}
	d.ticket = ticket{}
	return t.owner.d.refund(ctx, t)
}

// ticket identifies the units an admission recorded, for Refund.
type ticket struct {
	owner *Limiter
	key   string // the store key (a shard's, with shards)
	shard int    // the shard, with shards
	at    int64
	n     int64
	local bool // recorded by the local fallback store
	// mirror is the local time at which the local fallback store
	// recorded the units the store admitted (FailLocal); 0: none.
	mirror int64
}

// storeNow returns the time of a store call for the store: the limiter's
// clock in µs, or 0 for the store's own.
func (l *Limiter) storeNow() int64 {
	if l.clock != nil {
		return l.clock().UnixMicro()
	}
	return 0
}

// window returns the window of the policy's rule r, as a store's answer
// gives it: for a calendar rule, the length of the period that holds now.
func (l *Limiter) window(r int) time.Duration {
	rule := l.policy.Rules[r]
	if rule.Calendar == 0 {
		return rule.Window
	}
	start, end := rule.Calendar.period(rule.Location, l.now().UnixMicro())
	return time.Duration(end-start) * time.Microsecond
}

func (l *Limiter) minRule() int {
	for i, r := range l.policy.Rules {
		if r.Limit == l.minLimit {
			return i
		}
	}
	return 0
}

// bind completes d from its rule states: on a denial the binding rule is
// the violated one that frees up last (its RetryAfter is when the request
// fits every rule); when allowed, challenged, or denied by a lockout
// alone, it is the rule with the fewest units remaining. A lockout holds
// RetryAfter until it ends and leaves nothing Remaining.
func (l *Limiter) bind(d *Decision, allowed bool, src Source) {
	d.Allowed, d.Source = allowed, src
	rs := d.states.slice()
	lock := d.states.lock
	d.Challenged = d.states.challenged && !allowed
	b := binding(rs, allowed || d.Challenged)
	if lock > 0 && b >= 0 && rs[b].RetryAfter == 0 {
		b = binding(rs, true) // no rule is full: the lockout alone denies
	}
	if b >= 0 {
		s := &rs[b]
		d.Rule = b
		d.Limit = s.Limit
		d.Window = s.Window
		d.Remaining = s.Remaining()
		d.ResetAfter = s.ResetAfter
		if !allowed {
			d.RetryAfter = s.RetryAfter
		}
	}
	if lock > 0 && !allowed {
		d.Locked = true
		d.Remaining = 0
		d.RetryAfter = max(d.RetryAfter, lock)
		d.ResetAfter = max(d.ResetAfter, d.RetryAfter)
	}
}

// binding returns the index of the binding rule of rs: for an admission
// the one with the fewest units remaining (the later to empty on a tie),
// for a denial the one that frees up last; -1 when rs is empty.
func binding(rs []RuleState, allowed bool) int {
	b := -1
	for i := range rs {
		s := &rs[i]
		switch {
		case b < 0:
			b = i
		case !allowed:
			if s.RetryAfter > rs[b].RetryAfter {
				b = i
			}
		case s.Remaining() < rs[b].Remaining() ||
			s.Remaining() == rs[b].Remaining() && s.ResetAfter > rs[b].ResetAfter:
			b = i
		}
	}
	return b
}

// Reset forgets everything recorded for key: in the store, in the local
// fallback store and in the deny cache, on every instance when the store
// is an [Invalidator]; a pass ([Limiter.Pass]) goes with the counts. Use
// it, for example, to clear an account's failure count after a
// successful login. The error wraps the store's.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	key = boundKey(key)
	if l.shards == nil {
		return l.resetKey(ctx, key, 0)
	}
	var errs []error
	for i := range l.shards.count() {
		if err := l.resetKey(ctx, shardKey(key, i), i); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Pass records that key passed a challenge ([Rule].Challenge): a CAPTCHA
// solved, a second factor given. Until the longest window of the rules
// with a Challenge has passed (or the current period of such a calendar
// rule has ended), the key's requests are no longer challenged, on every
// instance that shares the store; they count as any other, up to each
// rule's Limit, where they are denied (and a Lockout starts). A later
// Pass never shortens one the key holds; [Limiter.Reset] forgets it with
// the key's counts.
//
// Call it once the app has verified the challenge, before the request
// that goes on is decided. The store records the pass, and so does the
// local fallback store under [FailLocal], so that a fallback honours it.
// Observers see an [EventPass]. Pass returns an error wrapping
// [ErrInvalidPolicy] when no rule of the policy (or of the key's tier)
// has a Challenge, one wrapping ctx.Err() when ctx is done, and one
// wrapping the store's when the store failed to record the pass (reported
// to the observers as an EventStoreError): the key is then challenged
// again, except by this instance's fallback.
func (l *Limiter) Pass(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ratekit: policy %q: pass: %w", l.policy.Name, err)
	}
	if l.tiers != nil {
		if t := l.tiers.pick(ctx, key, boundKey(key)); t != nil {
			return t.Pass(ctx, key)
		}
	}
	if l.passes == nil {
		return fmt.Errorf("ratekit: policy %q: Pass: no rule has a Challenge: %w", l.policy.Name, ErrInvalidPolicy)
	}
	key = boundKey(key)
	q := l.query(key, 0, 1, l.now())
	if l.local != nil {
		l.local.policy(q.Policy).pass(&q)
	}
	var err error
	if _, local := l.store.(Local); local {
		err = l.passes.Pass(context.WithoutCancel(ctx), q)
	} else {
		cc := newCallCtx(ctx, time.Now(), l.timeout)
		err = l.passes.Pass(cc, q)
		cc.release()
	}
	if err != nil {
		err = fmt.Errorf("ratekit: policy %q: pass: %w", l.policy.Name, err)
		l.emit(ctx, Event{Kind: EventStoreError, Key: key, Err: err})
		return err
	}
	l.emit(ctx, Event{Kind: EventPass, Key: key})
	return nil
}

// resetKey is Reset of a bounded store key (shard's, with shards).
func (l *Limiter) resetKey(ctx context.Context, key string, shard int) error {
	err := l.d.reset(ctx, key, shard)
	// The caches forget key once the store has: a denial decided before
	// then must not be cached after.
	if l.tiers != nil {
		for _, t := range l.tiers.by {
			t.forgetLocal(ctx, key, shard)
		}
	}
	l.forgetLocal(ctx, key, shard)
	return err
}

// forgetLocal forgets key in the limiter's deny cache and fallback store.
func (l *Limiter) forgetLocal(ctx context.Context, key string, shard int) {
	if l.deny != nil {
		l.deny.remove(key)
	}
	if l.local != nil {
		_ = l.local.Reset(context.WithoutCancel(ctx), l.query(key, shard, 0, time.Time{}))
	}
}

// reset is a reset of the store alone, reported to the observers when it
// fails.
func (l *Limiter) storeReset(ctx context.Context, key string, shard int) error {
	q := l.query(key, shard, 0, time.Time{})
	cc := newCallCtx(ctx, time.Now(), l.timeout)
	defer cc.release()
	if err := l.store.Reset(cc, q); err != nil {
		err = fmt.Errorf("ratekit: policy %q: reset: %w", l.policy.Name, err)
		l.emit(ctx, Event{Kind: EventStoreError, Key: key, Err: err})
		return err
	}
	return nil
}

// emit reports e to the limiter's observers.
func (l *Limiter) emit(ctx context.Context, e Event) {
	if l.observer == nil {
		return
	}
	e.Policy = l.policy.Name
	l.observer.Observe(ctx, e)
}

// maxKeyLen is the longest key stored as it is; longer keys are replaced
// by a fixed-length hash of themselves.
const maxKeyLen = 128

// BoundKey returns key as a [Limiter] hands it to its store, in
// [Query].Key: unchanged when it is at most 128 bytes, and otherwise a
// fixed-length hash of it, so that very long user-supplied keys cannot
// bloat the store (see boundKey). Drivers and tools that name a key's
// store records use it.
func BoundKey(key string) string { return boundKey(key) }

// boundKey returns key unchanged when it is at most maxKeyLen bytes, and
// otherwise a fixed-length hash of it ("#" and the base64url SHA-256), so
// very long user-supplied keys cannot bloat the store. The empty key and
// keys starting with '}' are hashed too: in a Redis key "{}" or "{}..."
// is no hash tag, which would spread one key's data over Cluster slots.
func boundKey(key string) string {
	if len(key) <= maxKeyLen && key != "" && key[0] != '}' {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "#" + base64.RawURLEncoding.EncodeToString(sum[:])
}

// TopRefused returns at most n of the keys the limiter refused most in
// the last five minutes or so (the current minute by the store's clock
// and the five before it), most refused first, ties in key order, with
// how many of their requests were refused: summed over every instance
// that shares the store when the store keeps refusals ([Refusals]:
// [MemoryStore] and the Redis drivers do), else this instance's alone. It
// returns nothing for n < 1. Keys are as the limiter hands them to its
// store ([BoundKey]): an address, an AppKey, a pseudonym made by package
// keyfunc/personal.
//
// Memory is fixed whatever the number of keys refused: each instance
// counts its refusals in sketches of 256 keys in all, which it empties
// into the store every 5 seconds while it refuses requests, and a store
// keeps a policy's 1,000 most refused keys of each minute. The counts are
// exact for the keys that stayed among the most refused. A key counted
// with an error is added with the count it certainly had, never more: a
// flood of keys made up one per request (an attacker's) reports each
// once at most, and does not push out a key refused more often than one
// in 32 of the refusals of those 5 seconds. When more keys than the
// sketches hold are each refused about as often as the others, the counts
// of the few kept are lower bounds. On a shared store the deny cache
// counts a denied key's flood exactly (see [WithDenyCache]).
//
// What this instance refused so far is added to the store first, so that
// it is counted at once; another instance's refusals count once it has
// added them, within 5 seconds. The error wraps the store's, or ctx's;
// each store call waits at most 2 seconds. TopRefused is safe for
// concurrent use; it is not meant for the request path.
func (l *Limiter) TopRefused(ctx context.Context, n int) ([]RefusedKey, error) {
	if n < 1 || l.refused == nil {
		return nil, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("ratekit: policy %q: top refused: %w", l.policy.Name, err)
	}
	r := l.refused
	fctx, cancel := context.WithTimeout(ctx, refusedTimeout)
	err := r.flush(fctx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("ratekit: policy %q: top refused: add this instance's refusals: %w", l.policy.Name, err)
	}
	rctx, cancel := context.WithTimeout(ctx, refusedTimeout)
	defer cancel()
	top, err := r.sink.TopRefused(rctx, l.policy.Name, n)
	if err != nil {
		return nil, fmt.Errorf("ratekit: policy %q: top refused: %w", l.policy.Name, err)
	}
	return top, nil
}

// refuse counts a refusal of the store key key, unless the limiter
// counts none.
func (l *Limiter) refuse(key string) {
	if l.refused != nil {
		l.refused.add(key, 1)
	}
}
