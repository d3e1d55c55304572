package core

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

// TierFunc names the tier of a key, for example the plan of an API key
// ("free", "pro"), looked up in the app's database. It gets the key as
// the limiter got it, however long.
type TierFunc func(ctx context.Context, key string) (tier string, err error)

// WithTiers chooses the rules per key: resolve names a key's tier and
// tiers maps each tier to its rules, which must have the windows (and
// calendar periods) of the policy's own Rules, with limits of their own
// (free: 100 a minute and 1,000 a day; pro: 1,000 a minute and 100,000 a
// day). The policy's own Rules apply to keys whose tier is unknown or
// cannot be resolved. All tiers share the policy's name, so a key's usage
// carries over when its tier changes: a key moved to a higher tier gets
// the higher limit on its next request after [Limiter.InvalidateTier] (or
// after the cache entry expires), on every instance when the store is a
// shared [Invalidator] store (Redis), and no cached denial of the old tier survives the move.
//
// A tier's calendar rule may have a Location of its own, so that a
// customer's tier carries the customer's time zone ("pro/Europe/Paris"):
// a key's period count carries over between tiers of one Location, and
// a key moved to another Location counts its new period from what that
// period already holds (nothing, unless it was used before). The
// policy's Lockout holds in every tier: a key locked out stays so when
// its tier changes.
//
// Resolved tiers are cached (see [WithTierCache]); resolve runs on the
// request path on a miss, under the request's context. A lookup that
// fails decides that request by the policy's own Rules and is not
// cached: the next request asks again.
func WithTiers(resolve TierFunc, tiers map[string][]Rule) Option {
	return func(o *options) {
		o.tierFunc = resolve
		o.tiers = tiers
	}
}

// WithTierCache sets how many keys' tiers are cached and for how long;
// 10,000 keys for a minute by default. size 0 turns the cache off
// (resolve runs on every request).
func WithTierCache(size int, ttl time.Duration) Option {
	return func(o *options) {
		o.tierCacheSize = size
		o.tierCacheTTL = ttl
	}
}

type tierSet struct {
	resolve TierFunc
	by      map[string]*Limiter
	cache   *lru.Cache[string, tierEntry]
	ttl     time.Duration
	// gen counts invalidations, so that a tier resolved before one is
	// not cached after it (see pick).
	gen atomic.Uint64
}

type tierEntry struct {
	l   *Limiter // nil: the default tier
	exp time.Time
}

// newTiers builds one limiter per tier, each with the base policy's name
// and the tier's rules.
func newTiers(store Store, base Policy, o options, opts []Option) (*tierSet, error) {
	if o.tierFunc == nil {
		return nil, fmt.Errorf("ratekit: policy %q: WithTiers resolve func is nil: %w", base.Name, ErrInvalidPolicy)
	}
	if len(o.tiers) == 0 {
		return nil, fmt.Errorf("ratekit: policy %q: WithTiers has no tiers: %w", base.Name, ErrInvalidPolicy)
	}
	if o.tierCacheSize < 0 || o.tierCacheSize > 0 && o.tierCacheTTL <= 0 {
		return nil, fmt.Errorf("ratekit: policy %q: WithTierCache(%d, %v): size must not be negative and ttl must be positive: %w",
			base.Name, o.tierCacheSize, o.tierCacheTTL, ErrInvalidPolicy)
	}
	ts := &tierSet{resolve: o.tierFunc, by: make(map[string]*Limiter, len(o.tiers)), ttl: o.tierCacheTTL}
	names := make([]string, 0, len(o.tiers))
	for name := range o.tiers {
		names = append(names, name)
	}
	sort.Strings(names)
	// Every tier keeps as much history as the largest limit of any, so a
	// key keeps its usage when its tier changes.
	keep := base.maxLimit()
	for _, name := range names {
		keep = max(keep, slidingMax(o.tiers[name]))
	}
	for _, name := range names {
		p := base
		p.Rules = o.tiers[name]
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("ratekit: WithTiers tier %q: %w", name, err)
		}
		if hasChallenge(p.Rules) != hasChallenge(base.Rules) {
			// A key's pass and counts live where a policy with a
			// challenge keeps them: a tier that had none would not see
			// them.
			return nil, fmt.Errorf("ratekit: policy %q: WithTiers tier %q: a Rules[].Challenge must be in every tier and the policy's Rules or in none, so that a key keeps its pass between tiers: %w",
				base.Name, name, ErrInvalidPolicy)
		}
		if !sameWindows(base.Rules, p.Rules) {
			// A key's history is kept for its rules' windows: a tier with
			// another window would start its count from nothing, or cut
			// short the history another tier needs.
			return nil, fmt.Errorf("ratekit: policy %q: WithTiers tier %q: every tier must have the windows of the policy's Rules (%s), with limits of its own, so that a key's usage carries over between tiers: %w",
				base.Name, name, windowsOf(base.Rules), ErrInvalidPolicy)
		}
		// The tier limiters take every option but the tiers themselves.
		child, err := NewLimiter(store, p, append(opts[:len(opts):len(opts)], withoutTiers(keep))...)
		if err != nil {
			return nil, fmt.Errorf("ratekit: WithTiers tier %q: %w", name, err)
		}
		ts.by[name] = child
	}
	if o.tierCacheSize > 0 {
		c, err := lru.New[string, tierEntry](o.tierCacheSize)
		if err != nil {
			return nil, fmt.Errorf("ratekit: policy %q: WithTierCache: %w", base.Name, err)
		}
		ts.cache = c
	}
	return ts, nil
}

// withoutTiers makes a tier's limiter: no tiers of its own, keeping keep
// units of history.
func withoutTiers(keep int64) Option {
	return func(o *options) {
		o.tierFunc = nil
		o.tiers = nil
		o.keep = keep
		o.tier = true
	}
}

// sameWindows reports whether two rule lists have the same set of windows
// and calendar periods. A calendar rule's Location may differ.
func sameWindows(a, b []Rule) bool {
	if len(a) != len(b) {
		return false
	}
	for _, r := range a {
		found := false
		for _, q := range b {
			if q.Window == r.Window && q.Calendar == r.Calendar {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// windowsOf lists the windows of rules, for error messages.
func windowsOf(rules []Rule) string {
	var b strings.Builder
	for i, r := range rules {
		if i > 0 {
			b.WriteString(", ")
		}
		if r.Calendar != 0 {
			b.WriteString(r.Calendar.String())
		} else {
			b.WriteString(r.Window.String())
		}
	}
	return b.String()
}

// pick returns the limiter of key's tier, or nil for the default tier.
// The tier is resolved from key and cached under its bounded form.
func (ts *tierSet) pick(ctx context.Context, key, bounded string) *Limiter {
	now := time.Now()
	if ts.cache != nil {
		if e, ok := ts.cache.Get(bounded); ok && now.Before(e.exp) {
			return e.l
		}
	}
	gen := ts.gen.Load()
	name, err := ts.resolve(ctx, key)
	if err != nil {
		// The default tier for this request alone: a failed lookup (a
		// caller that hung up, a database blip) is no answer to cache.
		return nil
	}
	l := ts.by[name]
	if ts.cache != nil {
		ts.cache.Add(bounded, tierEntry{l: l, exp: now.Add(ts.ttl)})
		if ts.gen.Load() != gen {
			// An invalidation came while resolve ran: what it returned
			// may be the old tier, so it must not answer later requests.
			ts.cache.Remove(bounded)
		}
	}
	return l
}

// forget drops the cached tier of a bounded key.
func (ts *tierSet) forget(bounded string) {
	ts.gen.Add(1)
	if ts.cache != nil {
		ts.cache.Remove(bounded)
	}
}

// forgetAll drops every cached tier, for when invalidations may have been
// missed.
func (ts *tierSet) forgetAll() {
	ts.gen.Add(1)
	if ts.cache != nil {
		ts.cache.Purge()
	}
}

// InvalidateTier forgets the cached tier of key, so that its next request
// resolves the tier again: call it after a key's plan changes. On a
// store that is an [Invalidator] (the Redis drivers) every instance forgets it: the invalidation goes out on the
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
	inv, ok := l.store.(Invalidator)
	if !ok {
		return nil
	}
	cc := newCallCtx(ctx, time.Now(), l.timeout)
	defer cc.release()
	if err := inv.Invalidate(cc, l.policy.Name, bounded); err != nil {
		err = fmt.Errorf("ratekit: policy %q: invalidate tier: %w", l.policy.Name, err)
		l.emit(ctx, Event{Kind: EventStoreError, Key: bounded, Err: err})
		return err
	}
	return nil
}
