package core

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Concurrency limits (Policy.InFlight): every admission takes a lease of
// its units, held until the decision is refunded (the request ended) or,
// on Redis, until its TTL passes without a renewal (the instance that
// took it died). A limiter renews the Redis leases it holds from one
// goroutine, which runs while it holds some and ends at the first renewal
// round that finds none.

// defaultLeaseTTL is Policy.LeaseTTL when 0.
const defaultLeaseTTL = 30 * time.Second

// minLeaseTTL is the shortest Policy.LeaseTTL: renewals every third of
// it must have time to reach the store.
const minLeaseTTL = time.Second

// leaseRetry is a denial's RetryAfter under an InFlight policy: a fixed
// hint, since a lease frees when a request ends, which no store can
// foresee.
const leaseRetry = time.Second

// renewBatch is the most lease operations one renewal round trip carries.
const renewBatch = 1000

// leaseAlgo marks store calls of leases; no Policy has it.
const leaseAlgo Algorithm = -1

// opRenew extends a lease still held (opRefund releases one).
const opRenew = 3

// errLeaseLost is reported when a renewal finds a lease gone before its
// release.
var errLeaseLost = errors.New("lease lost before its release: the key was reset, its renewals failed for a whole LeaseTTL, or Redis lost it")

//go:embed lease.lua
var leaseSource string

var leaseScript = redis.NewScript(leaseSource)

// leaseTTL returns the effective lease TTL.
func (p *Policy) leaseTTL() time.Duration {
	if p.LeaseTTL == 0 {
		return defaultLeaseTTL
	}
	return p.LeaseTTL
}

// validateInFlight is Validate for a policy with InFlight or LeaseTTL set.
func (p *Policy) validateInFlight() error {
	switch {
	case p.InFlight < 0:
		return fmt.Errorf("ratekit: policy %q InFlight is %d, must not be negative: %w", p.Name, p.InFlight, ErrInvalidPolicy)
	case p.InFlight == 0:
		return fmt.Errorf("ratekit: policy %q has a LeaseTTL but InFlight is 0: LeaseTTL applies to InFlight policies only: %w",
			p.Name, ErrInvalidPolicy)
	case p.InFlight > maxLogLimit:
		return fmt.Errorf("ratekit: policy %q InFlight %d is over %d: %w", p.Name, p.InFlight, maxLogLimit, ErrInvalidPolicy)
	case len(p.Rules) > 0:
		return fmt.Errorf("ratekit: policy %q has both InFlight and Rules: a policy limits requests in flight or requests per window, not both; "+
			"decide two limiters together (guard.WithAlso, core.AllowAll): %w", p.Name, ErrInvalidPolicy)
	case p.Algorithm != SlidingLog || p.Buckets != 0:
		return fmt.Errorf("ratekit: policy %q: Algorithm and Buckets do not apply to an InFlight policy: %w", p.Name, ErrInvalidPolicy)
	case p.Shards > 1:
		return fmt.Errorf("ratekit: policy %q: Shards does not apply to an InFlight policy: %w", p.Name, ErrInvalidPolicy)
	case p.Lockout != (Lockout{}):
		return fmt.Errorf("ratekit: policy %q: Lockout does not apply to an InFlight policy: a key is never denied for what it did before: %w",
			p.Name, ErrInvalidPolicy)
	case p.Shards < 0:
		return fmt.Errorf("ratekit: policy %q Shards is %d, must be within 0..%d: %w", p.Name, p.Shards, MaxShards, ErrInvalidPolicy)
	case p.LeaseTTL != 0 && p.LeaseTTL < minLeaseTTL:
		return fmt.Errorf("ratekit: policy %q LeaseTTL is %v, must be at least %v: %w", p.Name, p.LeaseTTL, minLeaseTTL, ErrInvalidPolicy)
	case p.LeaseTTL%time.Millisecond != 0:
		return fmt.Errorf("ratekit: policy %q LeaseTTL %v is not a whole number of milliseconds: %w", p.Name, p.LeaseTTL, ErrInvalidPolicy)
	}
	return nil
}

// leaseSet is the state of a limiter of an InFlight policy.
type leaseSet struct {
	limit int64
	ttl   time.Duration
	owner int64        // random: the limiter's lease ids are (owner, seq)
	seq   atomic.Int64 // the next seq; a lease of n units takes n of them
	rules []Rule       // {Limit: limit}, to read store answers
	mem   *memLeases   // the store's, on a MemoryStore
	local *memLeases   // the FailLocal fallback's, on a RedisStore

	mu      sync.Mutex
	held    map[int64]*heldLease // Redis leases to renew or release, by seq
	running bool                 // the renewal goroutine is alive
}

// heldLease is a Redis lease of the limiter.
type heldLease struct {
	key     string // the bounded key
	n       int64
	release bool      // to release: its release failed, or its take's answer was lost
	since   time.Time // when it was marked so
}

// inFlight completes l, a limiter of an InFlight policy.
func (l *Limiter) inFlight(o options) (*Limiter, error) {
	p := &l.policy
	if o.tierFunc != nil || o.tiers != nil {
		return nil, fmt.Errorf("ratekit: policy %q: WithTiers does not apply to an InFlight policy: %w", p.Name, ErrInvalidPolicy)
	}
	ls := &leaseSet{
		limit: p.InFlight,
		ttl:   p.leaseTTL(),
		owner: 1 + rand.Int64N(1<<52-1),
		rules: []Rule{{Limit: p.InFlight}},
		held:  make(map[int64]*heldLease),
	}
	switch s := l.store.(type) {
	case *MemoryStore:
		ls.mem = s.leasesOf(p.Name)
	default:
		if l.redis == nil {
			return nil, fmt.Errorf("ratekit: policy %q: InFlight needs a MemoryStore or a RedisStore, not %T: %w", p.Name, l.store, ErrInvalidPolicy)
		}
		if l.failure == FailLocal {
			l.local = NewMemoryStore(WithMaxKeys(fallbackMaxKeys))
			ls.local = l.local.leasesOf(p.Name)
		}
	}
	l.leases = ls
	return l, nil
}

// decision returns the decision of a lease request that saw used units
// held (after it, when admitted).
func (ls *leaseSet) decision(allowed bool, used int64, src Source) Decision {
	d := Decision{Allowed: allowed, Limit: ls.limit, Remaining: max(0, ls.limit-used), Source: src}
	st := RuleState{Limit: ls.limit, Used: used}
	if !allowed {
		d.RetryAfter, st.RetryAfter = leaseRetry, leaseRetry
	}
	d.states.n, d.states.a[0] = 1, st
	return d
}

// now returns the time of a lease operation for the store: the limiter's
// clock in µs, or 0 for the store's own.
func (l *Limiter) leaseNow() int64 {
	if l.clock != nil {
		return l.clock().UnixMicro()
	}
	return 0
}

// acquire is AllowN of an InFlight policy, for a bounded key and a valid
// n. It fails only when ctx ends before the store answered.
func (l *Limiter) acquire(ctx context.Context, key string, n int64) (Decision, error) {
	ls := l.leases
	seq := ls.seq.Add(n) - n
	if ls.mem != nil {
		used, ok := ls.mem.take(key, leaseID{ls.owner, seq}, n, ls.limit)
		d := ls.decision(ok, used, SourceStore)
		if ok {
			d.ticket = ticket{owner: l, key: key, at: seq, n: n}
		}
		l.emit(ctx, Event{Kind: EventDecision, Key: key, Cost: n, Decision: d})
		return d, nil
	}
	start := time.Now()
	br := l.breakerOf(key)
	var cause error
	if ok, probe := br.allow(start); ok {
		cc := newCallCtx(ctx, start, l.timeout)
		allowed, used, err := l.redis.leaseOp(cc, l.policy.Name, key, opTake, ls, seq, n, l.leaseNow())
		cc.release()
		lat := time.Since(start)
		if err == nil {
			if br.success() {
				l.emit(ctx, Event{Kind: EventBreakerClose})
			}
			l.answered(ctx, start)
			d := ls.decision(allowed, used, SourceStore)
			if allowed {
				d.ticket = ticket{owner: l, key: key, at: seq, n: n}
				ls.keep(l, seq, &heldLease{key: key, n: n})
				if ls.local != nil {
					// Mirrored, so that a fallback counts it.
					ls.local.take(key, leaseID{ls.owner, seq}, n, math.MaxInt64)
				}
			}
			l.emit(ctx, Event{Kind: EventDecision, Key: key, Cost: n, Decision: d, Latency: lat})
			return d, nil
		}
		var kerr *keyError
		if !errors.As(err, &kerr) {
			// The take may have been made with its answer lost: its units
			// are released in the background, not left until their TTL.
			ls.keep(l, seq, &heldLease{key: key, n: n, release: true, since: time.Now()})
		}
		if cerr := callerErr(ctx, time.Now()); cerr != nil {
			// The caller gave up: that says nothing about the store.
			if probe {
				br.abandon()
			}
			return Decision{}, fmt.Errorf("ratekit: policy %q: %w", l.policy.Name, cerr)
		}
		if errors.As(err, &kerr) {
			if probe {
				br.abandon()
			}
		} else if br.failure(time.Now()) {
			defer l.emit(ctx, Event{Kind: EventBreakerOpen, Err: err})
		}
		l.emit(ctx, Event{Kind: EventStoreError, Key: key, Cost: n, Err: err, Latency: lat})
		cause = err
	}
	d := l.leaseFallback(key, seq, n, true, br)
	l.fellBack(ctx, cause)
	l.emit(ctx, Event{Kind: EventDecision, Key: key, Cost: n, Decision: d})
	return d, nil
}

// peekLease is Peek of an InFlight policy, for a bounded key.
func (l *Limiter) peekLease(ctx context.Context, key string) (Decision, error) {
	ls := l.leases
	if ls.mem != nil {
		used := ls.mem.count(key)
		return ls.decision(used < ls.limit, used, SourceStore), nil
	}
	br := l.breakerOf(key)
	// A peek is not a decision: it says nothing of the store's health, and
	// takes no probe's place.
	if start := time.Now(); br.look(start) {
		cc := newCallCtx(ctx, start, l.timeout)
		allowed, used, err := l.redis.leaseOp(cc, l.policy.Name, key, opPeek, ls, 0, 1, l.leaseNow())
		cc.release()
		if err == nil {
			return ls.decision(allowed, used, SourceStore), nil
		}
		if cerr := callerErr(ctx, time.Now()); cerr != nil {
			return Decision{}, fmt.Errorf("ratekit: policy %q: %w", l.policy.Name, cerr)
		}
	}
	return l.leaseFallback(key, 0, 1, false, br), nil
}

// leaseFallback decides a lease request without the store.
func (l *Limiter) leaseFallback(key string, seq, n int64, take bool, br *breaker) Decision {
	ls := l.leases
	switch l.failure {
	case FailOpen:
		return Decision{Allowed: true, Limit: ls.limit, Remaining: ls.limit, Source: SourceOpen}
	case FailClosed:
		return Decision{Limit: ls.limit, RetryAfter: br.retryAfter(time.Now()), Source: SourceClosed}
	}
	var buf [1]Rule
	limit := l.shareOf(ls.rules, buf[:0])[0].Limit
	if !take {
		used := ls.local.count(key)
		d := ls.decision(used < limit, used, SourceLocal)
		d.Limit, d.Remaining = limit, max(0, limit-used)
		return d
	}
	used, ok := ls.local.take(key, leaseID{ls.owner, seq}, n, limit)
	d := ls.decision(ok, used, SourceLocal)
	d.Limit, d.Remaining = limit, max(0, limit-used)
	if ok {
		d.ticket = ticket{owner: l, key: key, at: seq, n: n, local: true}
	}
	return d
}

// release gives back the lease a ticket of this limiter identifies.
func (l *Limiter) release(ctx context.Context, t ticket) error {
	ls := l.leases
	switch {
	case t.local:
		ls.local.release(t.key, leaseID{ls.owner, t.at})
		return nil
	case ls.mem != nil:
		ls.mem.release(t.key, leaseID{ls.owner, t.at})
		return nil
	}
	// No renewal from now on: one still in flight finds the lease gone,
	// or is undone by this release, since a renewal never adds units.
	ls.drop(t.at)
	if ls.local != nil {
		ls.local.release(t.key, leaseID{ls.owner, t.at}) // the mirror
	}
	cc := newCallCtx(ctx, time.Now(), l.timeout)
	_, _, err := l.redis.leaseOp(cc, l.policy.Name, t.key, opRefund, ls, t.at, t.n, l.leaseNow())
	cc.release()
	if err != nil {
		// Tried again with the renewals, until it succeeds or the lease
		// has expired anyway.
		ls.keep(l, t.at, &heldLease{key: t.key, n: t.n, release: true, since: time.Now()})
		err = fmt.Errorf("ratekit: policy %q: release: %w", l.policy.Name, err)
		l.emit(ctx, Event{Kind: EventStoreError, Key: t.key, Cost: t.n, Err: err})
		return err
	}
	return nil
}

// keep registers a Redis lease to renew (or to release, h.release),
// starting the renewal goroutine if it is not running.
func (ls *leaseSet) keep(l *Limiter, seq int64, h *heldLease) {
	ls.mu.Lock()
	ls.held[seq] = h
	if !ls.running {
		ls.running = true
		go l.renewLoop()
	}
	ls.mu.Unlock()
}

// drop forgets a lease. The renewal goroutine ends at its next round if
// none is left: not at once, so that a limiter whose requests come one
// at a time does not start a goroutine for each.
func (ls *leaseSet) drop(seq int64) {
	ls.mu.Lock()
	delete(ls.held, seq)
	ls.mu.Unlock()
}

// idle reports whether no lease is left, marking the renewal goroutine
// ended if so.
func (ls *leaseSet) idle() bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if len(ls.held) == 0 {
		ls.running = false
		return true
	}
	return false
}

// renewLoop renews the limiter's Redis leases every third of their TTL,
// and retries the releases that failed, until a round finds no lease.
func (l *Limiter) renewLoop() {
	ls := l.leases
	tick := time.NewTicker(ls.ttl / 3)
	defer tick.Stop()
	for range tick.C {
		if ls.idle() {
			return
		}
		l.renewLeases(context.Background())
	}
}

// renewLeases makes one round of renewals and retried releases, each
// round trip bounded by a third of the TTL. Leases found gone and failed
// round trips are reported to the observers.
func (l *Limiter) renewLeases(ctx context.Context) {
	ls := l.leases
	type item struct {
		seq int64
		h   *heldLease
	}
	ls.mu.Lock()
	items := make([]item, 0, len(ls.held))
	for seq, h := range ls.held {
		items = append(items, item{seq, h})
	}
	ls.mu.Unlock()
	now := l.leaseNow()
	var (
		lost     []item
		failed   int
		firstErr error
	)
	for len(items) > 0 {
		chunk := items[:min(len(items), renewBatch)]
		items = items[len(chunk):]
		calls := make([]*rcall, len(chunk))
		for i, it := range chunk {
			op := byte(opRenew)
			if it.h.release {
				op = opRefund
			}
			calls[i] = l.redis.leaseCall(l.policy.Name, it.h.key, op, ls, it.seq, it.h.n, now)
		}
		rctx, cancel := context.WithTimeout(ctx, ls.ttl/3)
		l.redis.flight(rctx, calls)
		cancel()
		ls.mu.Lock()
		for i, c := range calls {
			it := chunk[i]
			mine := ls.held[it.seq] == it.h // not released or replaced meanwhile
			switch {
			case c.err != nil:
				failed++
				if firstErr == nil {
					firstErr = c.err
				}
				if mine && it.h.release && time.Since(it.h.since) > ls.ttl {
					delete(ls.held, it.seq) // expired by now
				}
			case it.h.release:
				if mine {
					delete(ls.held, it.seq)
				}
			case !c.allowed && mine:
				delete(ls.held, it.seq)
				lost = append(lost, it)
				if ls.local != nil {
					ls.local.release(it.h.key, leaseID{ls.owner, it.seq})
				}
			}
			putCall(c)
		}
		ls.mu.Unlock()
	}
	for _, it := range lost {
		l.emit(ctx, Event{Kind: EventStoreError, Key: it.h.key, Cost: it.h.n,
			Err: fmt.Errorf("ratekit: policy %q: %w", l.policy.Name, errLeaseLost)})
	}
	if failed > 0 {
		l.emit(ctx, Event{Kind: EventStoreError,
			Err: fmt.Errorf("ratekit: policy %q: renewing or releasing %d leases: %w", l.policy.Name, failed, firstErr)})
	}
}

// leaseKey is the Redis key of the leases of (policy, bounded key).
func (s *RedisStore) leaseKey(policy, key string) string {
	return s.redisKey(policy, key) + ":lease"
}

// leaseCall returns a store call of one lease operation.
func (s *RedisStore) leaseCall(policy, key string, op byte, ls *leaseSet, seq, n, now int64) *rcall {
	c := getCall()
	c.op, c.algo, c.n, c.now, c.at = op, leaseAlgo, n, now, seq
	c.lease = leaseArgs{limit: ls.limit, ttl: ls.ttl.Microseconds(), owner: ls.owner}
	if op == opPeek || op == opTake {
		c.rules = ls.rules
	}
	c.key = s.leaseKey(policy, key)
	if s.cluster {
		c.slot = slotOf(c.key)
	}
	return c
}

// leaseArgs are the arguments of a lease operation (rcall.lease).
type leaseArgs struct {
	limit, ttl, owner int64
}

// leaseOp runs one lease operation: for a take or peek, whether n units
// fit (were taken) and how many units the key holds after it.
func (s *RedisStore) leaseOp(ctx context.Context, policy, key string, op byte, ls *leaseSet, seq, n, now int64) (allowed bool, used int64, err error) {
	if err := ctx.Err(); err != nil {
		return false, 0, fmt.Errorf("ratekit: redis store: %w", err)
	}
	c := s.leaseCall(policy, key, op, ls, seq, n, now)
	if op == opTake && s.waitReplicas > 0 {
		s.runAndWait(ctx, c)
	} else if err := s.batch.do(ctx, c); err != nil {
		// The caller gave up; the flight still owns c.
		return false, 0, fmt.Errorf("ratekit: redis store: %w", err)
	}
	allowed, err = c.allowed, c.err
	if err == nil && c.rules != nil {
		used = c.states.a[0].Used
	}
	putCall(c)
	if err != nil {
		return false, 0, fmt.Errorf("ratekit: redis store: %w", err)
	}
	return allowed, used, nil
}

// leaseCommand builds the script call of lease operations: EVALSHA, or
// EVAL with the source when eval is set.
func leaseCommand(ctx context.Context, calls []*rcall, eval bool) noRetry {
	blob := make([]byte, 0, 7*8*len(calls))
	args := make([]any, 0, 4+len(calls))
	if eval {
		args = append(args, "eval", leaseSource)
	} else {
		args = append(args, "evalsha", leaseScript.Hash())
	}
	args = append(args, len(calls))
	for _, c := range calls {
		args = append(args, c.key)
		blob = appendFloat(blob, float64(c.op), float64(c.n), float64(c.lease.limit), float64(c.lease.ttl),
			float64(c.now), float64(c.lease.owner), float64(c.at))
	}
	return noRetry{redis.NewStringCmd(ctx, append(args, blob)...)}
}

// leaseID identifies a lease: its limiter's owner number and its first
// seq.
type leaseID struct{ owner, seq int64 }

// memLeases holds the leases of one policy in a MemoryStore. They have no
// TTL: the process that holds them is the store, so no holder can die and
// leave them behind.
type memLeases struct {
	seed    maphash.Seed
	stripes [memShards]leaseStripe
}

type leaseStripe struct {
	mu   sync.Mutex
	keys map[string]*memLeaseKey
}

// memLeaseKey is the leases of one key: units per lease, and their sum.
type memLeaseKey struct {
	used  int64
	units map[leaseID]int64
}

// leasesOf returns the leases of a policy, created on first use.
func (s *MemoryStore) leasesOf(policy string) *memLeases {
	if m, ok := s.leases.Load(policy); ok {
		return m.(*memLeases)
	}
	m := &memLeases{seed: s.seed}
	for i := range m.stripes {
		m.stripes[i].keys = make(map[string]*memLeaseKey)
	}
	v, _ := s.leases.LoadOrStore(policy, m)
	return v.(*memLeases)
}

// resetLeases forgets the leases of key under policy.
func (s *MemoryStore) resetLeases(policy, key string) {
	if m, ok := s.leases.Load(policy); ok {
		st := m.(*memLeases).stripe(key)
		st.mu.Lock()
		delete(st.keys, key)
		st.mu.Unlock()
	}
}

func (m *memLeases) stripe(key string) *leaseStripe {
	return &m.stripes[maphash.String(m.seed, key)%memShards]
}

// take adds lease id of n units to key if they fit limit, and returns the
// units held after it.
func (m *memLeases) take(key string, id leaseID, n, limit int64) (used int64, ok bool) {
	st := m.stripe(key)
	st.mu.Lock()
	defer st.mu.Unlock()
	k := st.keys[key]
	if k == nil {
		if n > limit {
			return 0, false
		}
		k = &memLeaseKey{units: make(map[leaseID]int64, 1)}
		st.keys[key] = k
	}
	if k.used+n > limit {
		return k.used, false
	}
	k.units[id] = n
	k.used += n
	return k.used, true
}

// release removes lease id from key; nothing if it is gone.
func (m *memLeases) release(key string, id leaseID) {
	st := m.stripe(key)
	st.mu.Lock()
	defer st.mu.Unlock()
	k := st.keys[key]
	if k == nil {
		return
	}
	if n, ok := k.units[id]; ok {
		delete(k.units, id)
		k.used -= n
		if len(k.units) == 0 {
			delete(st.keys, key)
		}
	}
}

// count returns the units held for key.
func (m *memLeases) count(key string) int64 {
	st := m.stripe(key)
	st.mu.Lock()
	defer st.mu.Unlock()
	if k := st.keys[key]; k != nil {
		return k.used
	}
	return 0
}
