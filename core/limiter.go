package core

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/core/internal/memstore"
)

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
	rules    []driver.Rule    // the policy's rules, as its store takes them
	local    *MemoryStore     // FailLocal's fallback store, on a shared store
	fb       *memstore.Policy // the policy's keys in local
	mem      *memstore.Policy // the policy's keys, when store is a *MemoryStore
	observer Observer
	deny     *denyCache
	breakers breakers
	tiers    *tierSet          // nil unless WithTiers
	tiered   []*Limiter        // the tiers' limiters, by tierSet index
	shards   *shardSet         // nil unless Policy.Shards > 1
	passes   driver.Challenges // the store, when a rule has a Challenge
	clock    func() time.Time
	waits    waitQueues // callers of WaitN
	released releases   // wakes them when a lease is released (InFlight)

	fleet      func() int // the instances using the policy, on a Fleet store
	differ     differ     // the configurations other instances announce for the policy
	wholeLimit bool       // WithLocalShare(false)
	episode    fallbackState
	refused    *refusals      // the refusals counted (TopRefused); nil: none
	replay     *replays       // fallback admissions to record in the store; nil: none
	replies    driver.Replies // the store's, if it tells of unread replies
	recovering atomic.Int64   // unix nanoseconds: until then the fallback decides, the store answering again (see recover)
	outage     atomic.Bool    // a circuit breaker opened: the store's next answer ends an outage
	longest    time.Duration  // the longest sliding window of the policy; 0 with calendar rules
	lists      *lists         // the policy's Allow and Deny lists; nil: none
}

// fallbackState tracks a limiter's fallback episodes.
type fallbackState struct {
	on    atomic.Bool
	count atomic.Int64 // fallback decisions in the episode
	last  atomic.Int64 // unix nanoseconds of the latest
}

// invalidate acts on what the store reports from any instance (see
// [driver.Invalidator]).
func (l *Limiter) invalidate(inv driver.Invalidation) {
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
	case inv.Reset:
		// Reset elsewhere: this instance forgets the key too, in its
		// fallback window as in its caches, so that an outage that
		// follows does not hold the user's admissions against it.
		if l.deny != nil {
			l.deny.remove(inv.Key)
		}
		if l.local != nil {
			_ = l.local.Reset(context.Background(), driver.Query{Policy: l.policy.Name, Key: inv.Key})
		}
		if l.replay != nil {
			l.replay.forget(inv.Key)
		}
	case inv.Pass:
		if l.fb != nil && l.passes != nil {
			q := l.query(inv.Key, 0, 1, l.now())
			l.fb.Pass(&q)
		}
	default:
		if l.deny != nil {
			l.deny.remove(inv.Key)
		}
		if l.local != nil {
			// A lockout lifted elsewhere no longer holds in this
			// instance's fallback either, nor a pass forgotten there.
			l.fb.Lift(inv.Key)
		}
	}
}

// Policy returns a copy of the limiter's policy.
func (l *Limiter) Policy() Policy {
	p := l.policy
	p.Rules = append([]Rule(nil), p.Rules...)
	return p
}

// tier returns the limiter of key's tier, or nil for the policy's own
// rules; l has tiers.
func (l *Limiter) tier(ctx context.Context, key string) *Limiter {
	if i := l.tiers.pick(ctx, key, boundKey(key)); i >= 0 {
		return l.tiered[i]
	}
	return nil
}

// Allow is AllowN(ctx, key, 1).
func (l *Limiter) Allow(ctx context.Context, key string) (d Decision, err error) {
	err = l.allowN(ctx, key, 1, &d) // into the result: a Decision is 424 bytes
	return d, err
}

// AllowN decides whether n units for key fit every rule of the policy now
// and, if so, records them.
//
// A store failure is not an error: the failure policy decides, and the
// Decision's Source says so; the failure goes to the observers. AllowN
// returns an error only when n is invalid (wrapping [ErrInvalidCost]: n
// below 1, or above the smallest limit of the key's rules, so that it
// could never fit) or ctx is done (wrapping ctx.Err()).
func (l *Limiter) AllowN(ctx context.Context, key string, n int64) (d Decision, err error) {
	err = l.allowN(ctx, key, n, &d)
	return d, err
}

// allowN is AllowN into *d, which is zero and stays zero on an error:
// Allow and AllowN decide into their result, without copying a Decision
// from one to the other.
func (l *Limiter) allowN(ctx context.Context, key string, n int64, d *Decision) error {
	if l.lists != nil && n >= 1 && n <= l.minLimit && ctx.Err() == nil && l.listed(ctx, key, n, d, true) {
		return nil
	}
	if l.tiers != nil {
		if t := l.tier(ctx, key); t != nil {
			return t.allowN(ctx, key, n, d)
		}
	}
	if n < 1 || n > l.minLimit {
		return fmt.Errorf("ratekit: policy %q: cost %d outside 1..%d: %w", l.policy.Name, n, l.minLimit, ErrInvalidCost)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ratekit: policy %q: %w", l.policy.Name, err)
	}
	key, shard := l.shards.pick(boundKey(key))
	if l.mem != nil {
		l.allowMem(ctx, key, shard, n, d)
		return nil
	}
	var err error
	*d, err = l.d.allow(ctx, key, shard, n)
	return err
}

// allowMem is AllowN's decision on the limiter's own MemoryStore (l.mem),
// into *d, which is zero: in place, as Take would, without copying the
// query, the result and the rule states across the Store interface.
func (l *Limiter) allowMem(ctx context.Context, key string, shard int, n int64, d *Decision) {
	var q driver.Query
	l.setQuery(&q, key, shard, n, l.stamp())
	l.mem.Decide(&q, true, &d.res)
	l.decided(ctx, key, shard, n, d.res.Allowed, d.res.At, d)
}

// decided completes d, a decision of the limiter's Local store whose rule
// states are set, and reports it.
func (l *Limiter) decided(ctx context.Context, key string, shard int, n int64, allowed bool, at int64, d *Decision) {
	l.bind(d, allowed, SourceStore)
	if allowed {
		// Field by field: a composite literal is built on the stack and
		// copied in 16-byte moves that read across its 8-byte stores,
		// which the CPU cannot forward (a stall on every admission).
		t := &d.ticket
		*t = ticket{}
		t.owner, t.key, t.shard, t.at, t.n = l.d, key, shard, at, n
	} else if !d.res.Challenged {
		l.refuse(key) // a challenge is no refusal
	}
	if l.observer != nil {
		l.emit(ctx, Event{Kind: EventDecision, Key: key, Cost: n, Decision: *d})
	}
}

// Peek reports the decision a request of one unit for key would get now,
// consuming nothing. A peek is not a decision: observers do not see it,
// and a store failure it meets does not count toward the circuit breaker.
// Errors are as for [Limiter.AllowN].
func (l *Limiter) Peek(ctx context.Context, key string) (Decision, error) {
	if err := ctx.Err(); err != nil {
		return Decision{}, fmt.Errorf("ratekit: policy %q: %w", l.policy.Name, err)
	}
	if l.lists != nil {
		var d Decision
		if l.listed(ctx, key, 1, &d, false) {
			return d, nil
		}
	}
	if l.tiers != nil {
		if t := l.tier(ctx, key); t != nil {
			return t.Peek(ctx, key)
		}
	}
	key, shard := l.shards.peek(boundKey(key))
	d, err := l.d.peek(ctx, key, shard)
	if err == nil && (d.res.Extra > 0 || d.res.Exempt) {
		d.Grant = l.grantOf(ctx, key) // who granted it, until when
	}
	return d, err
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
func (l *Limiter) query(key string, shard int, n int64, now time.Time) driver.Query {
	var q driver.Query
	l.setQuery(&q, key, shard, n, now)
	return q
}

// setQuery sets *q, which is zero, to query(key, shard, n, now), field
// by field: the decisions of a MemoryStore build theirs where they use
// it.
func (l *Limiter) setQuery(q *driver.Query, key string, shard int, n int64, now time.Time) {
	q.Policy, q.Key, q.Rules = l.policy.Name, key, l.shards.rules(shard, l.rules)
	q.Algorithm, q.Buckets, q.N, q.Keep = driver.Algorithm(l.policy.Algorithm), l.policy.buckets(), n, l.keep
	q.Lockout = driver.Lockout(l.policy.Lockout)
	if l.clock != nil && !now.IsZero() {
		q.Now = now.UnixMicro()
	}
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
	start, end := driver.Rule(rule).PeriodMicros(l.now().UnixMicro())
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
	rs := d.res.Rules.All()
	lock := d.res.LockedFor
	d.Challenged = d.res.Challenged && !allowed
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
// is an [driver.Invalidator]; a pass ([Limiter.Pass]) goes with the counts. Use
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
		if t := l.tier(ctx, key); t != nil {
			return t.Pass(ctx, key)
		}
	}
	if l.passes == nil {
		return fmt.Errorf("ratekit: policy %q: Pass: no rule has a Challenge: %w", l.policy.Name, ErrInvalidPolicy)
	}
	key = boundKey(key)
	q := l.query(key, 0, 1, l.now())
	if l.fb != nil {
		l.fb.Pass(&q)
	}
	if _, local := l.store.(driver.Local); local {
		if err := l.passes.Pass(context.WithoutCancel(ctx), q); err != nil {
			err = fmt.Errorf("ratekit: policy %q: pass: %w", l.policy.Name, err)
			l.emit(ctx, Event{Kind: EventStoreError, Key: key, Err: err})
			return err
		}
		l.emit(ctx, Event{Kind: EventPass, Key: key})
		return nil
	}
	// Through the circuit breaker, as decisions go: a pass the store did
	// not take holds here, and in the store once it answers.
	ok, _, cause, err := l.call(ctx, &q, true, func(ctx context.Context, _ bool) error { return l.passes.Pass(ctx, q) })
	if err != nil {
		return fmt.Errorf("ratekit: policy %q: pass: %w", l.policy.Name, err)
	}
	if !ok {
		return l.later(key, 0, false, cause)
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
		for _, t := range l.tiered {
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
	if l.replay != nil {
		l.replay.forget(key)
	}
}

// reset is a reset of the store alone, reported to the observers when it
// fails.
func (l *Limiter) storeReset(ctx context.Context, key string, shard int) error {
	q := l.query(key, shard, 0, time.Time{})
	cc := l.callCtx(ctx, time.Now())
	defer cc.release()
	if err := l.store.Reset(cc, q); err != nil {
		err = fmt.Errorf("ratekit: policy %q: reset: %w", l.policy.Name, err)
		l.emit(ctx, Event{Kind: EventStoreError, Key: key, Err: err})
		return err
	}
	return nil
}

// callCtx returns the context of a store call of l that begins at start
// (see callCtx). Release it after the call.
func (l *Limiter) callCtx(ctx context.Context, start time.Time) *callCtx {
	c := newCallCtx(ctx, start, l.timeout)
	c.replies = l.replies
	return c
}

// emit reports e to the limiter's observers.
func (l *Limiter) emit(ctx context.Context, e Event) {
	if l.observer == nil {
		return
	}
	e.Policy = l.policy.Name
	l.observer.Observe(ctx, e)
}

// boundKey returns key as the limiter hands it to its store
// (driver.BoundKey): unchanged when it is at most 128 bytes, else a
// fixed-length hash of it.
func boundKey(key string) string { return driver.BoundKey(key) }

// TopRefused returns at most n of the keys the limiter refused most in
// the last five minutes or so (the current minute by the store's clock
// and the five before it), most refused first, ties in key order, with
// how many of their requests were refused: summed over every instance
// that shares the store when the store keeps refusals ([driver.Refusals]:
// [MemoryStore] and the Redis drivers do), else this instance's alone. It
// returns nothing for n < 1. Keys are as the limiter hands them to its
// store ([driver.BoundKey]): an address, an AppKey, a pseudonym made by package
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
	out := make([]RefusedKey, len(top))
	for i, k := range top {
		out[i] = RefusedKey(k)
	}
	return out, nil
}

// refuse counts a refusal of the store key key, unless the limiter
// counts none.
func (l *Limiter) refuse(key string) {
	if l.refused != nil {
		l.refused.add(key, 1)
	}
}

// InvalidateTier forgets the cached tier of key, so that its next request
// resolves the tier again: call it after a key's plan changes. On a
// store that is an [driver.Invalidator] (the Redis drivers) every instance forgets it: the invalidation goes out on the
// store's invalidation channel (Redis pub/sub, the channel that carries
// resets to the other instances' deny caches), and each limiter of the
// policy on that store (on Redis, with the same prefix) drops the key's cached tier
// when the message arrives, a round trip later. An instance that is
// reconnecting to Redis misses the message; it forgets every cached tier
// when it subscribes again, and until then the cache's ttl
// ([WithTierCache]) bounds how long it keeps the old tier.
//
// This instance forgets the key at once; the error, wrapping the store's,
// says the other instances may not have heard (the publish is bounded by
// the limiter's timeout). It does nothing on a limiter without tiers.
func (l *Limiter) InvalidateTier(ctx context.Context, key string) error {
	if l.tiers == nil {
		return nil
	}
	bounded := boundKey(key)
	l.tiers.forget(bounded)
	inv, ok := l.store.(driver.Invalidator)
	if !ok {
		return nil
	}
	cc := l.callCtx(ctx, time.Now())
	defer cc.release()
	if err := inv.Invalidate(cc, l.policy.Name, bounded); err != nil {
		err = fmt.Errorf("ratekit: policy %q: invalidate tier: %w", l.policy.Name, err)
		l.emit(ctx, Event{Kind: EventStoreError, Key: bounded, Err: err})
		return err
	}
	return nil
}
