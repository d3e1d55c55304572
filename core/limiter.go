package core

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strconv"
	"sync/atomic"
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
}

// WithTimeout bounds every store call; 20 ms ([DefaultTimeout]) by default.
// It must be positive. The bound holds whatever the go-redis client's own
// options are.
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

// WithDenyCache sets how many denied keys the limiter remembers locally,
// least recently used first out; 10,000 by default, 0 turns the cache off.
// A key denied with RetryAfter r cannot be admitted before r passes, so
// until then a flood from it is answered without a store call. The cache
// never admits: it only answers denials that the store would give as
// well. A limiter on a [MemoryStore] has no deny cache: the store answers
// as fast.
func WithDenyCache(size int) Option {
	return func(o *options) { o.denyCacheSize = size }
}

// WithBreaker sets the circuit breaker: after failures consecutive store
// failures, the limiter stops calling the store for cooldown and decides
// by its failure policy at once; then one probe call at a time tests the
// store. The default is 5 failures and 1 s; failures 0 turns it off.
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
// clocks agree: leave it unset in production.
func WithClock(clock func() time.Time) Option {
	return func(o *options) { o.clock = clock }
}

// Limiter decides whether requests of one [Policy] are admitted, key by
// key. Build one per policy at start-up and share it: a Limiter is safe for
// concurrent use.
type Limiter struct {
	store    Store
	mem      *MemoryStore // store, when it is a MemoryStore
	policy   Policy
	minLimit int64
	timeout  time.Duration
	failure  FailurePolicy
	local    *MemoryStore
	observer Observer
	deny     *denyCache
	breaker  breaker
	idPrefix string
	seq      atomic.Uint64
	tiers    *tierSet
	shards   *shardSet // nil unless Policy.Shards > 1
	clock    func() time.Time
}

// NewLimiter returns a limiter for policy on store. It returns an error
// wrapping [ErrInvalidPolicy], naming the field, when the policy or an
// option cannot work.
func NewLimiter(store Store, policy Policy, opts ...Option) (*Limiter, error) {
	if store == nil {
		return nil, fmt.Errorf("ratekit: NewLimiter: store is nil: %w", ErrInvalidPolicy)
	}
	if err := policy.Validate(); err != nil {
		return nil, err
	}
	o := options{
		timeout:       DefaultTimeout,
		denyCacheSize: 10000,
		breakerFails:  5,
		breakerCool:   time.Second,
		tierCacheSize: 10000,
		tierCacheTTL:  time.Minute,
	}
	for _, opt := range opts {
		opt(&o)
	}
	switch {
	case o.timeout <= 0:
		return nil, fmt.Errorf("ratekit: policy %q: WithTimeout %v must be positive: %w", policy.Name, o.timeout, ErrInvalidPolicy)
	case o.failure > FailClosed:
		return nil, fmt.Errorf("ratekit: policy %q: WithFailurePolicy: unknown %v: %w", policy.Name, o.failure, ErrInvalidPolicy)
	case o.denyCacheSize < 0:
		return nil, fmt.Errorf("ratekit: policy %q: WithDenyCache size %d must not be negative: %w", policy.Name, o.denyCacheSize, ErrInvalidPolicy)
	case o.breakerFails < 0:
		return nil, fmt.Errorf("ratekit: policy %q: WithBreaker failures %d must not be negative: %w", policy.Name, o.breakerFails, ErrInvalidPolicy)
	case o.breakerFails > 0 && o.breakerCool <= 0:
		return nil, fmt.Errorf("ratekit: policy %q: WithBreaker cooldown %v must be positive: %w", policy.Name, o.breakerCool, ErrInvalidPolicy)
	}
	policy.Rules = append([]Rule(nil), policy.Rules...)
	var nonce [6]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, fmt.Errorf("ratekit: NewLimiter: nonce: %w", err)
	}
	l := &Limiter{
		store:    store,
		policy:   policy,
		minLimit: policy.minLimit(),
		timeout:  o.timeout,
		failure:  o.failure,
		observer: o.observer,
		breaker:  breaker{threshold: int32(o.breakerFails), cooldown: o.breakerCool},
		idPrefix: base64.RawURLEncoding.EncodeToString(nonce[:]) + ".",
		shards:   newShardSet(policy),
		clock:    o.clock,
	}
	l.mem, _ = store.(*MemoryStore)
	if o.failure == FailLocal {
		if l.mem != nil {
			l.local = l.mem
		} else {
			l.local = NewMemoryStore()
		}
	}
	if o.denyCacheSize > 0 && l.mem == nil {
		l.deny = newDenyCache(o.denyCacheSize)
	}
	if o.tierFunc != nil || o.tiers != nil {
		ts, err := newTiers(store, policy, o, opts)
		if err != nil {
			return nil, err
		}
		l.tiers = ts
	}
	return l, nil
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
func (l *Limiter) AllowN(ctx context.Context, key string, n int64) (Decision, error) {
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
	now := l.now()
	if l.deny != nil {
		if d, ok := l.deny.get(key, n, now); ok {
			l.emit(ctx, Event{Kind: EventDecision, Key: key, Cost: n, Decision: d})
			return d, nil
		}
	}
	id := inprocID
	if l.mem == nil {
		id = l.nextID()
	}
	return l.decide(ctx, l.query(key, shard, n, id, now), shard, now, true)
}

// Peek reports the decision a request of one unit for key would get now,
// consuming nothing. Errors are as for [Limiter.AllowN].
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
	now := l.now()
	return l.decide(ctx, l.query(key, shard, 1, "", now), shard, now, false)
}

// now returns the time of a decision by the limiter's clock; the zero
// time when the store's own clock decides.
func (l *Limiter) now() time.Time {
	if l.clock != nil {
		return l.clock()
	}
	return time.Now()
}

// query returns the store query for a bounded key (shard's, with shards)
// decided at now.
func (l *Limiter) query(key string, shard int, n int64, id string, now time.Time) Query {
	q := Query{Policy: l.policy.Name, Key: key, Rules: l.shards.rules(shard, l.policy.Rules),
		Algorithm: l.policy.Algorithm, Buckets: l.policy.buckets(), N: n, ID: id}
	if l.clock != nil && !now.IsZero() {
		q.Now = now.UnixMicro()
	}
	return q
}

// inprocID is the call ID of takes on the in-process store, which needs
// none: a call cannot be retried there, and refunds go by time.
const inprocID = "m"

func (l *Limiter) nextID() string {
	return l.idPrefix + strconv.FormatUint(l.seq.Add(1), 36)
}

// decide asks the store, falling back by the failure policy. It fails
// only when ctx ends before the store answered.
func (l *Limiter) decide(ctx context.Context, q Query, shard int, now time.Time, take bool) (Decision, error) {
	start := time.Now()
	if ok, probe := l.breaker.allow(start); ok {
		var gen uint64
		if take && l.deny != nil {
			gen = l.deny.generation(q.Key)
		}
		sctx, cancel := ctx, context.CancelFunc(nil)
		if l.mem == nil {
			sctx, cancel = context.WithTimeout(ctx, l.timeout)
		}
		var (
			res Result
			err error
		)
		if take {
			res, err = l.store.Take(sctx, q)
		} else {
			res, err = l.store.Peek(sctx, q)
		}
		if cancel != nil {
			cancel()
		}
		lat := time.Since(start)
		if err == nil {
			if l.breaker.success() {
				l.emit(ctx, Event{Kind: EventBreakerClose})
			}
			d := l.decision(res, SourceStore)
			if take && d.Allowed {
				d.ticket = ticket{owner: l, key: q.Key, shard: shard, id: q.ID, at: res.At, n: q.N}
			}
			if take && !d.Allowed && l.deny != nil {
				l.deny.put(q.Key, q.N, now, d, gen)
			}
			l.emit(ctx, Event{Kind: EventDecision, Key: q.Key, Cost: q.N, Decision: d, Latency: lat})
			return d, nil
		}
		if cerr := ctx.Err(); cerr != nil {
			// The caller gave up: that says nothing about the store.
			if probe {
				l.breaker.abandon()
			}
			return Decision{}, fmt.Errorf("ratekit: policy %q: %w", l.policy.Name, cerr)
		}
		if l.breaker.failure(time.Now()) {
			defer l.emit(ctx, Event{Kind: EventBreakerOpen, Err: err})
		}
		l.emit(ctx, Event{Kind: EventStoreError, Key: q.Key, Cost: q.N, Err: err, Latency: lat})
	}
	d := l.fallback(ctx, q, shard, take)
	l.emit(ctx, Event{Kind: EventDecision, Key: q.Key, Cost: q.N, Decision: d})
	return d, nil
}

// fallback decides without the store.
func (l *Limiter) fallback(ctx context.Context, q Query, shard int, take bool) Decision {
	switch l.failure {
	case FailOpen:
		r := l.minRule()
		return Decision{Allowed: true, Limit: l.minLimit, Window: l.policy.Rules[r].Window, Remaining: l.minLimit, Rule: r, Source: SourceOpen}
	case FailClosed:
		r := l.minRule()
		return Decision{Limit: l.minLimit, Window: l.policy.Rules[r].Window, RetryAfter: l.breaker.retryAfter(time.Now()), Rule: r, Source: SourceClosed}
	}
	var (
		res Result
		err error
	)
	// The local store works on the caller's context without the store
	// timeout: it never blocks.
	lctx := context.WithoutCancel(ctx)
	if take {
		res, err = l.local.Take(lctx, q)
	} else {
		res, err = l.local.Peek(lctx, q)
	}
	if err != nil {
		// Unreachable for a MemoryStore; admit rather than fail the request.
		return Decision{Allowed: true, Limit: l.minLimit, Remaining: l.minLimit, Source: SourceOpen}
	}
	d := l.decision(res, SourceLocal)
	if take && d.Allowed {
		d.ticket = ticket{owner: l, key: q.Key, shard: shard, id: q.ID, at: res.At, n: q.N, local: true}
	}
	return d
}

func (l *Limiter) minRule() int {
	for i, r := range l.policy.Rules {
		if r.Limit == l.minLimit {
			return i
		}
	}
	return 0
}

// decision turns a store result into a Decision: on a denial the binding
// rule is the violated one that frees up last (its RetryAfter is when the
// request fits every rule); when allowed it is the rule with the fewest
// units remaining.
func (l *Limiter) decision(res Result, src Source) Decision {
	d := Decision{Allowed: res.Allowed, Source: src}
	d.states.set(res.Rules)
	b := -1
	for i, s := range res.Rules {
		switch {
		case b < 0:
			b = i
		case !res.Allowed:
			if s.RetryAfter > res.Rules[b].RetryAfter {
				b = i
			}
		case s.Remaining() < res.Rules[b].Remaining() ||
			s.Remaining() == res.Rules[b].Remaining() && s.ResetAfter > res.Rules[b].ResetAfter:
			b = i
		}
	}
	if b < 0 {
		return d
	}
	s := res.Rules[b]
	d.Rule = b
	d.Limit = s.Limit
	d.Window = s.Window
	d.Remaining = s.Remaining()
	d.ResetAfter = s.ResetAfter
	if !res.Allowed {
		d.RetryAfter = s.RetryAfter
	}
	return d
}

// Reset forgets everything recorded for key: in the store, in the local
// fallback store and in the deny cache. Use it, for example, to clear an
// account's failure count after a successful login. The error wraps the
// store's.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	key = boundKey(key)
	if l.shards != nil {
		return l.shards.reset(ctx, l, key)
	}
	return l.resetKey(ctx, key, 0)
}

// resetKey is Reset of a bounded store key (shard's, with shards).
func (l *Limiter) resetKey(ctx context.Context, key string, shard int) error {
	// The deny caches forget key once the store has: a denial decided
	// before then must not be cached after.
	defer l.forgetDenial(key)
	if l.tiers != nil {
		for _, t := range l.tiers.by {
			if t.local != nil && t.local != l.store {
				_ = t.local.Reset(context.WithoutCancel(ctx), t.query(key, shard, 0, "", time.Time{}))
			}
		}
	}
	q := l.query(key, shard, 0, "", time.Time{})
	if l.local != nil && l.local != l.store {
		_ = l.local.Reset(context.WithoutCancel(ctx), q)
	}
	sctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	if err := l.store.Reset(sctx, q); err != nil {
		err = fmt.Errorf("ratekit: policy %q: reset: %w", l.policy.Name, err)
		l.emit(ctx, Event{Kind: EventStoreError, Key: key, Err: err})
		return err
	}
	return nil
}

// forgetDenial removes key from the deny caches of l and its tiers.
func (l *Limiter) forgetDenial(key string) {
	if l.deny != nil {
		l.deny.remove(key)
	}
	if l.tiers != nil {
		for _, t := range l.tiers.by {
			if t.deny != nil {
				t.deny.remove(key)
			}
		}
	}
}

// refund gives back the units a ticket of this limiter identifies.
func (l *Limiter) refund(ctx context.Context, t ticket) error {
	if l.deny != nil {
		// Once the units are back: a denial decided before then must not
		// be cached after.
		defer l.deny.remove(t.key)
	}
	q := l.query(t.key, t.shard, t.n, t.id, time.Time{})
	if t.local {
		_ = l.local.Refund(context.WithoutCancel(ctx), q, t.at)
		return nil
	}
	sctx, cancel := ctx, context.CancelFunc(nil)
	if l.mem == nil {
		sctx, cancel = context.WithTimeout(ctx, l.timeout)
		defer cancel()
	}
	if err := l.store.Refund(sctx, q, t.at); err != nil {
		err = fmt.Errorf("ratekit: policy %q: refund: %w", l.policy.Name, err)
		l.emit(ctx, Event{Kind: EventStoreError, Key: t.key, Cost: t.n, Err: err})
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

// boundKey returns key unchanged when it is at most maxKeyLen bytes, and
// otherwise a fixed-length hash of it ("#" and the base64url SHA-256), so
// very long user-supplied keys cannot bloat the store.
func boundKey(key string) string {
	if len(key) <= maxKeyLen {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "#" + base64.RawURLEncoding.EncodeToString(sum[:])
}
