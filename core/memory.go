package core

import (
	"context"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

const memShards = 64

// MemoryStore is a [Store] that keeps windows in this process, with the
// same semantics as [RedisStore]. It is the store for a single instance and
// the local fallback of a [Limiter] (FailLocal).
//
// Keys are spread over sharded locks. Idle keys are swept as the store is
// used, without a background goroutine, so memory stays bounded by the
// keys active within their longest window. A MemoryStore is safe for
// concurrent use; its zero value is not usable, call [NewMemoryStore].
type MemoryStore struct {
	now    func() int64
	seed   maphash.Seed
	ops    atomic.Uint64
	shards [memShards]memShard
}

type memShard struct {
	mu  sync.Mutex
	m   map[memKey]*memLog
	ops uint32
}

// memLog is the sliding log of one key: events sorted by time, each
// holding the units admitted at that microsecond.
type memLog struct {
	ev      []memEvent   // SlidingLog: units admitted at each microsecond
	bk      [][]memEvent // SlidingBuckets: per rule, units per bucket index
	expires int64
}

// memEvent is the units admitted at one microsecond (sliding log) or in
// one bucket (sliding buckets). cum, kept by the sliding log only, is the
// running total of units up to and including this event, so a window's
// count and a RetryAfter are binary searches, not sums over the window.
type memEvent struct{ at, n, cum int64 }

// NewMemoryStore returns an empty in-process store.
func NewMemoryStore() *MemoryStore {
	s := &MemoryStore{seed: maphash.MakeSeed()}
	// Wall time at start plus monotonic time since, so that a wall clock
	// step cannot move the windows.
	base := time.Now()
	baseMicro := base.UnixMicro()
	s.now = func() int64 { return baseMicro + time.Since(base).Microseconds() }
	for i := range s.shards {
		s.shards[i].m = make(map[memKey]*memLog)
	}
	return s
}

// memKey names one window: a struct rather than a joined string, so that
// looking it up allocates nothing.
type memKey struct{ policy, key string }

func keyOf(q Query) memKey { return memKey{q.Policy, q.Key} }

func (s *MemoryStore) shard(k memKey) *memShard {
	var h maphash.Hash
	h.SetSeed(s.seed)
	h.WriteString(k.policy)
	h.WriteByte(0)
	h.WriteString(k.key)
	return &s.shards[h.Sum64()%memShards]
}

// Take implements [Store].
func (s *MemoryStore) Take(ctx context.Context, q Query) (Result, error) {
	return s.decide(ctx, q, true)
}

// Peek implements [Store].
func (s *MemoryStore) Peek(ctx context.Context, q Query) (Result, error) {
	return s.decide(ctx, q, false)
}

func (s *MemoryStore) decide(ctx context.Context, q Query, take bool) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("ratekit: memory store: %w", err)
	}
	if q.Algorithm != SlidingLog && q.Algorithm != SlidingBuckets {
		return Result{}, fmt.Errorf("ratekit: memory store: algorithm %v: %w", q.Algorithm, ErrInvalidPolicy)
	}
	now := q.Now
	if now == 0 {
		now = s.now()
	}
	res := s.decideShard(q, take, now)
	s.tick(now)
	return res, nil
}

// decideShard decides q under its shard's lock.
func (s *MemoryStore) decideShard(q Query, take bool, now int64) Result {
	k := keyOf(q)
	sh := s.shard(k)
	states := make([]RuleState, len(q.Rules))
	sh.mu.Lock()
	defer sh.mu.Unlock()
	lg := sh.m[k]
	var maxW int64
	for _, r := range q.Rules {
		maxW = max(maxW, r.Window.Microseconds())
	}
	if q.Algorithm == SlidingBuckets {
		return s.decideBuckets(sh, k, lg, q, take, now, maxW, states)
	}
	var ev []memEvent
	if lg != nil {
		lg.evict(now - maxW)
		ev = lg.ev
	}
	allowed := evaluate(ev, q.Rules, q.N, now, states)
	if take && allowed {
		if lg == nil {
			lg = &memLog{}
			sh.m[k] = lg
		}
		lg.add(now, q.N)
		lg.expires = now + maxW
		for i := range states {
			states[i].Used += q.N
			states[i].ResetAfter = time.Duration(q.Rules[i].Window.Microseconds()) * time.Microsecond
		}
	} else if lg != nil && len(lg.ev) == 0 {
		delete(sh.m, k)
	}
	sh.sweep(now)
	return Result{Allowed: allowed, At: now, Rules: states}
}

// evaluate fills states for ev at time now and reports whether n more
// units fit every rule. It costs O(rules × log(events)).
func evaluate(ev []memEvent, rules []Rule, n, now int64, states []RuleState) bool {
	allowed := true
	var newest, total int64
	if len(ev) > 0 {
		newest, total = ev[len(ev)-1].at, ev[len(ev)-1].cum
	}
	for i, r := range rules {
		w := r.Window.Microseconds()
		cutoff := now - w
		idx, _ := slices.BinarySearchFunc(ev, cutoff, func(e memEvent, t int64) int {
			if e.at <= t {
				return -1
			}
			return 1
		})
		var used, base int64
		if idx < len(ev) {
			base = ev[idx].cum - ev[idx].n
			used = total - base
		}
		st := RuleState{Limit: r.Limit, Window: r.Window, Used: used}
		if used > 0 {
			st.ResetAfter = time.Duration(newest+w-now) * time.Microsecond
		}
		if need := used + n - r.Limit; need > 0 {
			allowed = false
			// The first event by which need units of the window have left.
			j, _ := slices.BinarySearchFunc(ev[idx:], base+need, func(e memEvent, t int64) int {
				if e.cum < t {
					return -1
				}
				return 1
			})
			if j += idx; j < len(ev) {
				st.RetryAfter = time.Duration(ev[j].at+w-now) * time.Microsecond
			}
		}
		states[i] = st
	}
	return allowed
}

// evict drops events at or before cutoff.
func (lg *memLog) evict(cutoff int64) {
	i := 0
	for i < len(lg.ev) && lg.ev[i].at <= cutoff {
		i++
	}
	if i > 0 {
		// Reslice rather than copy: append reallocates, copying only the
		// live events, once the backing array is full.
		lg.ev = lg.ev[i:]
	}
}

// add records n units at time at, keeping events sorted and merged.
func (lg *memLog) add(at, n int64) {
	l := len(lg.ev)
	switch {
	case l == 0:
		lg.ev = append(lg.ev, memEvent{at: at, n: n, cum: n})
		return
	case lg.ev[l-1].at < at:
		lg.ev = append(lg.ev, memEvent{at: at, n: n, cum: lg.ev[l-1].cum + n})
		return
	case lg.ev[l-1].at == at:
		lg.ev[l-1].n += n
		lg.ev[l-1].cum += n
		return
	}
	// An injected clock stepped back: insert in order, then fix the
	// running totals after the insertion point.
	i, found := findAt(lg.ev, at)
	if found {
		lg.ev[i].n += n
	} else {
		lg.ev = slices.Insert(lg.ev, i, memEvent{at: at, n: n})
	}
	lg.recount(i)
}

// recount recomputes the running totals from event i on.
func (lg *memLog) recount(i int) {
	// Only differences of totals are read, so any base will do.
	var cum int64
	if i > 0 {
		cum = lg.ev[i-1].cum
	}
	for j := i; j < len(lg.ev); j++ {
		cum += lg.ev[j].n
		lg.ev[j].cum = cum
	}
}

// sweep deletes a few expired keys every so many operations, so idle keys
// do not pile up. Go's randomised map iteration spreads the work over
// every key in time. It checks more keys (64 per 16 operations) than the
// operations can add, so a stream of keys each seen once (rotating client
// addresses) cannot grow the shard past a few times its live keys.
func (sh *memShard) sweep(now int64) {
	sh.ops++
	if sh.ops%16 != 0 {
		return
	}
	sh.sweepSome(now, 64)
}

// sweepSome checks up to limit keys and deletes the expired ones.
func (sh *memShard) sweepSome(now int64, limit int) {
	checked := 0
	for k, lg := range sh.m {
		if lg.expires <= now {
			delete(sh.m, k)
		}
		checked++
		if checked == limit {
			break
		}
	}
}

// tick sweeps the shards in turn, one every 32 operations store-wide, so
// that a shard whose keys see no more traffic is still emptied. It runs
// outside any shard lock.
func (s *MemoryStore) tick(now int64) {
	n := s.ops.Add(1)
	if n%32 != 0 {
		return
	}
	sh := &s.shards[(n/32)%memShards]
	sh.mu.Lock()
	sh.sweepSome(now, 64)
	sh.mu.Unlock()
}

// Refund implements [Store].
func (s *MemoryStore) Refund(ctx context.Context, q Query, at int64) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ratekit: memory store: %w", err)
	}
	k := keyOf(q)
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	lg := sh.m[k]
	if lg == nil {
		return nil
	}
	if q.Algorithm == SlidingBuckets {
		for i, r := range q.Rules {
			if i < len(lg.bk) {
				lg.bk[i] = bucketAdd(lg.bk[i], at/q.bucketWidth(r), -q.N)
			}
		}
		return nil
	}
	i, found := findAt(lg.ev, at)
	if found {
		lg.ev[i].n -= min(q.N, lg.ev[i].n)
		if lg.ev[i].n == 0 {
			lg.ev = slices.Delete(lg.ev, i, i+1)
		}
		lg.recount(i)
	}
	if len(lg.ev) == 0 {
		delete(sh.m, k)
	}
	return nil
}

// Reset implements [Store].
func (s *MemoryStore) Reset(ctx context.Context, q Query) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ratekit: memory store: %w", err)
	}
	k := keyOf(q)
	sh := s.shard(k)
	sh.mu.Lock()
	delete(sh.m, k)
	sh.mu.Unlock()
	return nil
}

// len returns the number of keys the store holds, swept or not yet.
func (s *MemoryStore) len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// decideBuckets is decide for SlidingBuckets: each rule's window is split
// into buckets of width g; the bucket holding the window's start is counted
// in full, so the count never falls short of the true sliding count.
func (s *MemoryStore) decideBuckets(sh *memShard, k memKey, lg *memLog, q Query, take bool, now, maxW int64, states []RuleState) Result {
	if lg == nil {
		lg = &memLog{}
	}
	if len(lg.bk) != len(q.Rules) {
		lg.bk = make([][]memEvent, len(q.Rules))
	}
	allowed := true
	var maxG int64
	for i, r := range q.Rules {
		g := q.bucketWidth(r)
		maxG = max(maxG, g)
		w := r.Window.Microseconds()
		lo := (now - w) / g
		bk := lg.bk[i]
		j := 0
		for j < len(bk) && bk[j].at < lo {
			j++
		}
		bk = append(bk[:0], bk[j:]...)
		lg.bk[i] = bk
		states[i] = bucketState(bk, r, g, q.N, now)
		if states[i].RetryAfter > 0 {
			allowed = false
		}
	}
	if take && allowed {
		for i, r := range q.Rules {
			g := q.bucketWidth(r)
			lg.bk[i] = bucketAdd(lg.bk[i], now/g, q.N)
			states[i].Used += q.N
			states[i].ResetAfter = time.Duration((now/g+1)*g+r.Window.Microseconds()-now) * time.Microsecond
		}
		lg.expires = now + maxW + maxG
		sh.m[k] = lg
	}
	if _, ok := sh.m[k]; ok && lg.empty() {
		delete(sh.m, k)
	}
	sh.sweep(now)
	return Result{Allowed: allowed, At: now, Rules: states}
}

// bucketState computes a rule's state over its live buckets bk (sorted by
// index, width g) for n more units at now.
func bucketState(bk []memEvent, r Rule, g, n, now int64) RuleState {
	w := r.Window.Microseconds()
	st := RuleState{Limit: r.Limit, Window: r.Window}
	for _, b := range bk {
		st.Used += b.n
	}
	if len(bk) > 0 {
		st.ResetAfter = time.Duration((bk[len(bk)-1].at+1)*g+w-now) * time.Microsecond
	}
	if need := st.Used + n - r.Limit; need > 0 {
		var acc int64
		for _, b := range bk {
			acc += b.n
			if acc >= need {
				// Bucket b stops counting once the window starts after it.
				st.RetryAfter = time.Duration((b.at+1)*g+w-now) * time.Microsecond
				break
			}
		}
	}
	return st
}

// bucketAdd adds n (possibly negative) units to bucket idx, dropping
// buckets that fall to zero.
func bucketAdd(bk []memEvent, idx, n int64) []memEvent {
	i, found := findAt(bk, idx)
	if !found {
		if n <= 0 {
			return bk
		}
		return slices.Insert(bk, i, memEvent{at: idx, n: n})
	}
	bk[i].n += n
	if bk[i].n <= 0 {
		bk = slices.Delete(bk, i, i+1)
	}
	return bk
}

func (lg *memLog) empty() bool {
	if len(lg.ev) > 0 {
		return false
	}
	for _, b := range lg.bk {
		if len(b) > 0 {
			return false
		}
	}
	return true
}

// findAt finds the event at time (or bucket index) at in ev, sorted by at.
func findAt(ev []memEvent, at int64) (int, bool) {
	return slices.BinarySearchFunc(ev, at, func(e memEvent, t int64) int {
		switch {
		case e.at < t:
			return -1
		case e.at > t:
			return 1
		}
		return 0
	})
}
