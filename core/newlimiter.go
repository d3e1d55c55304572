package core

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/core/internal/memstore"
)

// fallbackMaxKeys bounds the local store of FailLocal.
const fallbackMaxKeys = 100_000

// NewLimiter returns a limiter for policy on store. It returns an error
// wrapping [ErrInvalidPolicy], naming the field, when the policy or an
// option cannot work, or when the store lacks a capability the policy
// needs (an InFlight policy needs [driver.Leases], a rule with a Challenge
// [driver.Challenges]).
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
	l := newLimiterOf(store, policy, o)
	l.lists, _ = policy.parseLists() // Validate parsed them
	if hasChallenge(policy.Rules) {
		if l.passes, err = challengesOf(store, policy.Name); err != nil {
			return nil, err
		}
	}
	_, local := store.(driver.Local)
	l.sharing(store, o, local)
	if policy.InFlight > 0 {
		return l, l.inFlight(o, local)
	}
	inv, _ := store.(driver.Invalidator)
	l.rates(store, o, local, inv != nil)
	if rec, ok := store.(driver.Recorder); ok && !local {
		l.replays(rec)
	}
	if o.tierFunc != nil || o.tiers != nil {
		if l.tiers, l.tiered, err = newTiers(store, policy, o, opts); err != nil {
			return nil, err
		}
	}
	l.countRefusals()
	if inv != nil && !local && l.hears() {
		inv.Watch(policy.Name, l.invalidate)
	}
	return l, nil
}

// hears reports whether l keeps something the other instances'
// invalidations change: a deny cache, a fallback store, replays, cached
// tiers.
func (l *Limiter) hears() bool {
	return l.deny != nil || l.local != nil || l.replay != nil || l.tiers != nil && l.tiers.cache != nil
}

// newLimiterOf returns the limiter of policy (a copy of its rules) on
// store, with options o, before its modes and capabilities are wired in.
func newLimiterOf(store Store, policy Policy, o options) *Limiter {
	policy.Rules = append([]Rule(nil), policy.Rules...)
	rules := driverRules(policy.Rules)
	return &Limiter{
		rules:      rules,
		store:      store,
		policy:     policy,
		keep:       max(o.keep, policy.maxLimit()),
		minLimit:   policy.minLimit(),
		timeout:    o.timeout,
		failure:    o.failure,
		observer:   o.observer,
		shards:     newShardSet(policy, rules),
		clock:      o.clock,
		wholeLimit: o.wholeLimit,
	}
}

// sharing wires in what l keeps beside its store: the breakers, the
// refusals counted, FailLocal's fallback store and the fleet, on a store
// shared by instances (not local).
func (l *Limiter) sharing(store Store, o options, local bool) {
	l.breakers.init(store, o)
	l.replies, _ = store.(driver.Replies)
	if !o.tier && !o.noRefusals {
		l.refused = newRefusals(l.policy, store, o.refusedEvery)
		l.refused.failed = func(err error) {
			e := Event{Kind: EventStoreError, Err: fmt.Errorf("ratekit: policy %q: adding its top refused keys to the store: %w", l.policy.Name, err)}
			if l.observer != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				l.notice(context.Background(), e) // counts dropped: said even without an observer
			}
		}
	}
	if !local && o.failure == FailLocal {
		l.local = NewMemoryStore(WithMaxKeys(fallbackMaxKeys))
		l.fb = memstore.PolicyOf(l.local, l.policy.Name)
	}
	if f, ok := store.(driver.Fleet); ok && !local && !o.tier {
		l.join(f, o)
	}
}

// replays makes l record in rec what its failure policy admits.
func (l *Limiter) replays(rec driver.Recorder) {
	l.replay = newReplays(l, rec)
	if !hasCalendar(l.policy.Rules) {
		l.longest = slidingWindow(l.policy.Rules)
	}
}

// rates makes l decide rates: in place on its own MemoryStore, through
// any other Local store, or on a shared store, with a deny cache when the
// store tells of resets (an Invalidator).
func (l *Limiter) rates(store Store, o options, local, invalidates bool) {
	if local {
		l.d = localRates{l}
		l.mem = memstore.PolicyOf(store, l.policy.Name)
		return
	}
	l.d = sharedRates{l}
	if o.denyCacheSize > 0 && invalidates {
		l.deny = newDenyCache(o.denyCacheSize)
	}
}

// challengesOf returns store's challenges, for a policy with a
// Rules[].Challenge, or an error naming what the store lacks.
func challengesOf(store Store, policy string) (driver.Challenges, error) {
	c, ok := store.(driver.Challenges)
	if !ok {
		return nil, fmt.Errorf("ratekit: policy %q has a Rules[].Challenge, but store %T keeps no challenges (driver.Challenges): %w",
			policy, store, ErrInvalidPolicy)
	}
	return c, nil
}

// countRefusals has l's tiers count their refusals into l's, and the
// deny caches of l and of its tiers count those they answer, when l
// counts them.
func (l *Limiter) countRefusals() {
	if l.refused == nil {
		return
	}
	for _, t := range append([]*Limiter{l}, l.tiered...) {
		t.refused = l.refused
		if t.deny != nil {
			t.deny.refused = l.refused
			l.refused.caches = append(l.refused.caches, t.deny)
		}
	}
}

// newTiers builds one limiter per tier, each with the base policy's name
// and the tier's rules: the set that resolves keys to tiers, and the
// tiers' limiters in the order of its indexes.
func newTiers(store Store, base Policy, o options, opts []Option) (*tierSet, []*Limiter, error) {
	if o.tierFunc == nil {
		return nil, nil, fmt.Errorf("ratekit: policy %q: WithTiers resolve func is nil: %w", base.Name, ErrInvalidPolicy)
	}
	if len(o.tiers) == 0 {
		return nil, nil, fmt.Errorf("ratekit: policy %q: WithTiers has no tiers: %w", base.Name, ErrInvalidPolicy)
	}
	if o.tierCacheSize < 0 || o.tierCacheSize > 0 && o.tierCacheTTL <= 0 {
		return nil, nil, fmt.Errorf("ratekit: policy %q: WithTierCache(%d, %v): size must not be negative and ttl must be positive: %w",
			base.Name, o.tierCacheSize, o.tierCacheTTL, ErrInvalidPolicy)
	}
	ts := &tierSet{resolve: o.tierFunc, index: make(map[string]int, len(o.tiers)), ttl: o.tierCacheTTL}
	var tiered []*Limiter
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
			return nil, nil, fmt.Errorf("ratekit: WithTiers tier %q: %w", name, err)
		}
		if hasChallenge(p.Rules) != hasChallenge(base.Rules) {
			// A key's pass and counts live where a policy with a
			// challenge keeps them: a tier that had none would not see
			// them.
			return nil, nil, fmt.Errorf("ratekit: policy %q: WithTiers tier %q: a Rules[].Challenge must be in every tier and the policy's Rules or in none, so that a key keeps its pass between tiers: %w",
				base.Name, name, ErrInvalidPolicy)
		}
		if !sameWindows(base.Rules, p.Rules) {
			// A key's history is kept for its rules' windows: a tier with
			// another window would start its count from nothing, or cut
			// short the history another tier needs.
			return nil, nil, fmt.Errorf("ratekit: policy %q: WithTiers tier %q: every tier must have the windows of the policy's Rules (%s), with limits of its own, so that a key's usage carries over between tiers: %w",
				base.Name, name, windowsOf(base.Rules), ErrInvalidPolicy)
		}
		// The tier limiters take every option but the tiers themselves.
		child, err := NewLimiter(store, p, append(opts[:len(opts):len(opts)], withoutTiers(keep))...)
		if err != nil {
			return nil, nil, fmt.Errorf("ratekit: WithTiers tier %q: %w", name, err)
		}
		ts.index[name] = len(tiered)
		tiered = append(tiered, child)
	}
	if o.tierCacheSize > 0 {
		c, err := lru.New[string, tierEntry](o.tierCacheSize)
		if err != nil {
			return nil, nil, fmt.Errorf("ratekit: policy %q: WithTierCache: %w", base.Name, err)
		}
		ts.cache = c
	}
	return ts, tiered, nil
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

// driverRules returns rules as a store takes them.
func driverRules(rules []Rule) []driver.Rule {
	out := make([]driver.Rule, len(rules))
	for i, r := range rules {
		out[i] = driver.Rule(r)
	}
	return out
}
