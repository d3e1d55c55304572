package core

import (
	"context"
	"fmt"
	"hash/maphash"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// memShards is the number of locks a policy's keys are spread over.
const memShards = 64

// defaultMaxKeys bounds a MemoryStore unless WithMaxKeys sets another.
const defaultMaxKeys = 1 << 20

// MemoryStore is a [Store] that keeps windows in this process, with the
// same semantics as the Redis drivers (package redisstore). It is the store for a single instance and
// the local fallback of a [Limiter] (FailLocal).
//
// A decision hashes its key once, takes one of 64 locks of its policy and
// allocates nothing. Idle keys are swept as the store is used, without a
// background goroutine: every key is looked at within a bounded number of
// operations, so memory follows the keys active within their longest
// window. The number of keys is bounded too ([WithMaxKeys]). It keeps the
// refusals its limiters count, per minute and bounded as the Redis drivers
// keep them ([Refusals]). A MemoryStore is safe for concurrent use; its
// zero value is not usable, call [NewMemoryStore].
type MemoryStore struct {
	base      time.Time // monotonic time at start
	baseMicro int64     // wall time at start, µs
	seed      maphash.Seed
	maxKeys   int64
	keys      atomic.Int64 // keys held, in every policy
	shedding  sync.Mutex   // held by the one goroutine making room

	mu       sync.Mutex
	policies map[string]*memPolicy
	byName   atomic.Pointer[map[string]*memPolicy] // policies, read without the lock
	list     atomic.Pointer[[]*memPolicy]          // the policies, for sweeping
	tickN    atomic.Uint64
	leases   sync.Map    // policy name -> *memLeases (Policy.InFlight)
	refused  *refusalLog // the refusals of its limiters (Refusals)
}

var (
	_ Local      = (*MemoryStore)(nil)
	_ Leases     = (*MemoryStore)(nil)
	_ Challenges = (*MemoryStore)(nil)
	_ Refusals   = (*MemoryStore)(nil)
)

// MemoryOption configures a [MemoryStore].
type MemoryOption func(*memoryOptions)

type memoryOptions struct {
	maxKeys int
}

// WithMaxKeys bounds the number of keys the store holds; 1,048,576 by
// default (a limiter's FailLocal fallback store holds at most 100,000).
// It must be at least 1.
//
// When a new key takes the store past the bound, a key of the policy
// that holds the most keys is forgotten, as if its window had passed: the
// least recently used of a sample, never one locked out (Policy.Lockout)
// before its lockout ends. So a client who floods new keys (rotating
// addresses, phone numbers or account names) costs bounded memory, and
// what it can achieve is bounded too:
//   - it cannot make another policy forget its windows while its own
//     policy holds more keys: the flooded policy pays for the flood;
//   - within the flooded policy, once the store is full, it can make keys
//     not used lately forget their windows; a key in active use is rarely
//     the least recently used of the sample;
//   - it cannot lift a lockout: locked-out keys are kept even past the
//     bound, up to twice the bound; only a store holding twice its bound
//     forgets locked-out keys too, the least recently used first.
//
// Size the bound above the keys expected within the longest window, or
// use a shared store (package redisstore), whose memory Redis bounds.
func WithMaxKeys(n int) MemoryOption {
	return func(o *memoryOptions) { o.maxKeys = n }
}

// memPolicy holds the keys of one policy.
type memPolicy struct {
	shards [memShards]memShard
	name   string
	store  *MemoryStore
	keys   atomic.Int64 // keys held
}

// memShard is the keys of a policy whose hashes fall on it, under a lock
// of its own. What a decision uses comes first, and each shard fills 128
// bytes (two cache lines, as the adjacent-line prefetcher pairs them), so
// that the locks of two shards never share a cache line.
type memShard struct {
	mu     sync.Mutex
	ops    uint32
	m      map[uint64]*memLog // by the key's hash, keys of one hash chained (memLog.next)
	policy *memPolicy
	// forgot is the latest decision time of a key reset or evicted: a
	// key made again is born after it, so that a refund of a decision
	// made before the reset does nothing.
	forgot int64
	keys   []memSlot // every key of the shard, for sweeping in turn
	cursor int
	free   []*memLog // removed logs, for new keys to reuse
	_      [32]byte
}

// memSlot is a key of a shard, for sweeping: its window and a lower
// bound of when it expires (memLog.expires, which never decreases), so
// that a sweep reads the keys' bounds side by side and looks at a key's
// window only once its bound has passed; and the key's hash, which
// finds it in the shard's map when it is removed.
type memSlot struct {
	lg      *memLog
	expires int64  // µs; lg.expires was at least this when last looked at
	hash    uint64 // of lg.key
}

// memFree bounds the removed logs a shard keeps for reuse: keys that
// come and go (a window shorter than the gap between a key's requests,
// rotating addresses) reuse memory rather than allocate, and what is kept
// stays small (a log keeps its first chunk of events only, when it has no
// other).
const memFree = 16

// A key's sliding log is kept in chunks of memChunkLen events (1.5 KiB),
// so that a growing log never copies its events, nor leaves the arrays it
// outgrew to the garbage collector: each event is written once, where it
// stays until whole chunks have left the window. The first chunk starts
// at 4 events and doubles up to memChunkLen, so that a key of a few units
// holds a few events. memSpareChunks chunks that left the window are kept
// for the events to come.
const (
	memChunkBits   = 6
	memChunkLen    = 1 << memChunkBits
	memSpareChunks = 2
)

// memLog is the window of one key: events sorted by time, each holding the
// units admitted at that microsecond (SlidingLog), or bucket counts per
// bucket width (SlidingBuckets).
//
// What a sliding-log decision reads and writes comes first, in two cache
// lines: the first holds what finds the key (key, next) and every field
// that a decision writes, the second what it reads of the window, which
// changes only when the window's start moves; so that the decisions of
// a hot key from several cores move one line of it between them, not
// two. The newest event's time and running total are kept as well (last,
// lastCum), so that a decision reads no event at all while the first
// rule's window starts at the same event. The struct's size, 192 bytes
// (TestMemLayout), is a size class of the allocator that keeps its
// objects on cache-line boundaries. Event indexes are int32: a log holds
// at most a few times the 100,000 units a rule keeps.
type memLog struct {
	key  string
	n    int32
	head int32
	used int64 // µs; last decision
	// last, lastN and lastCum are event n-1's time, units and running
	// total, when the log has a live event (n > head). They are that
	// event's own: the event in its chunk has its time, but its units
	// and running total are written there only when another event is
	// pushed, or before the events are read (flush), so that decisions
	// in one microsecond, a hot key's, write none of the chunk's lines.
	last, lastN, lastCum int64
	expires              int64 // µs; the key holds nothing live after

	// ev holds the SlidingLog's events in chunks (see memChunkLen): event
	// i is ev[i>>memChunkBits][i&(memChunkLen-1)], read by event(i); the
	// events are [0, n), the live ones [head, n). Every chunk is
	// memChunkLen long but the first while it is the only one.
	ev  [][]memEvent
	cur [inlineRules]int32 // per rule, where its window started last time
	// The first rule's window start, cur[0], as start last found it:
	// event cur[0]'s time (startAt) and running total before it
	// (startBase), and event cur[0]-1's time, or math.MinInt64 when
	// cur[0] was the head (startPrev); so that while the window starts
	// at the same event, a decision reads no event at all (see
	// startOf). startAt is math.MinInt64 when they are not known.
	startAt, startBase, startPrev int64

	next     *memLog  // the next key of the same hash
	index    int32    // in memShard.keys
	offences int32    // lockouts so far (Lockout.Max)
	born     int64    // µs; no decision before it is refunded
	lock     int64    // µs; the key is locked out until then
	lockKeep int64    // µs; its offences are remembered until then
	pass     int64    // µs; the key passed a challenge until then
	x        *memMore // SlidingBuckets and calendar rules; nil until used
	_        [8]byte  // to 192 bytes
}

// memMore is what a key holds for SlidingBuckets and calendar rules,
// apart from its window so that a sliding-log window stays small.
type memMore struct {
	bk  []memBuckets // SlidingBuckets
	cal []memPeriod  // calendar rules: the units of each period
}

// more returns lg.x, made on first use.
func (lg *memLog) more() *memMore {
	if lg.x == nil {
		lg.x = new(memMore)
	}
	return lg.x
}

// memPeriod is the units admitted in one calendar period [start, end).
type memPeriod struct{ start, end, n int64 }

// memEvent is the units admitted at one microsecond (sliding log) or in
// one bucket (sliding buckets). cum, kept by the sliding log only, is the
// running total of units up to and including this event, so a window's
// count and a RetryAfter are binary searches, not sums over the window.
type memEvent struct{ at, n, cum int64 }

// memBuckets is the buckets of one width, sorted by index.
type memBuckets struct {
	width int64
	b     []memEvent
}

// NewMemoryStore returns an empty in-process store.
func NewMemoryStore(opts ...MemoryOption) *MemoryStore {
	o := memoryOptions{maxKeys: defaultMaxKeys}
	for _, opt := range opts {
		opt(&o)
	}
	if o.maxKeys < 1 {
		panic(fmt.Sprintf("ratekit: NewMemoryStore: WithMaxKeys(%d): must be at least 1", o.maxKeys))
	}
	// Wall time at start plus monotonic time since, so that a wall clock
	// step cannot move the windows.
	base := time.Now()
	s := &MemoryStore{base: base, baseMicro: base.UnixMicro(), seed: maphash.MakeSeed(),
		maxKeys: int64(o.maxKeys), policies: make(map[string]*memPolicy)}
	s.refused = newRefusalLog(s.now)
	s.list.Store(new([]*memPolicy))
	s.byName.Store(&map[string]*memPolicy{})
	return s
}

// now returns the store's clock in µs.
func (s *MemoryStore) now() int64 { return s.baseMicro + time.Since(s.base).Microseconds() }

// policy returns the keys of a policy, created on first use.
func (s *MemoryStore) policy(name string) *memPolicy {
	if p := (*s.byName.Load())[name]; p != nil {
		return p // the common case: no lock
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.policies[name]
	if p == nil {
		p = &memPolicy{name: name, store: s}
		for i := range p.shards {
			p.shards[i].m = make(map[uint64]*memLog)
			p.shards[i].policy = p
		}
		s.policies[name] = p
		list := append(slices.Clone(*s.list.Load()), p)
		s.list.Store(&list)
		byName := maps.Clone(*s.byName.Load())
		byName[name] = p
		s.byName.Store(&byName)
	}
	return p
}

// memPolicyOf returns the keys of policy name when store is a
// *MemoryStore itself (not a type wrapping one, whose Take may do more),
// for a Limiter on it to decide in place: as Take does, without the
// copies of the Store interface's values. It returns nil for any other
// store.
func memPolicyOf(store Store, name string) *memPolicy {
	if s, ok := store.(*MemoryStore); ok {
		return s.policy(name)
	}
	return nil
}

// shard returns the shard of key and the key's hash, which finds it in
// the shard (memShard.get): a key is hashed once.
func (p *memPolicy) shard(key string) (*memShard, uint64) {
	h := maphash.String(p.store.seed, key)
	return &p.shards[h%memShards], h
}

// get returns the window of key, whose hash is h, or nil; sh.mu is held.
func (sh *memShard) get(h uint64, key string) *memLog {
	for lg := sh.m[h]; lg != nil; lg = lg.next {
		if lg.key == key {
			return lg
		}
	}
	return nil
}

// Take implements [Store].
func (s *MemoryStore) Take(ctx context.Context, q Query) (Result, error) {
	return s.result(ctx, &q, true)
}

// Peek implements [Store].
func (s *MemoryStore) Peek(ctx context.Context, q Query) (Result, error) {
	return s.result(ctx, &q, false)
}

func (s *MemoryStore) result(ctx context.Context, q *Query, take bool) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("ratekit: memory store: %w", err)
	}
	if q.Algorithm != SlidingLog && q.Algorithm != SlidingBuckets {
		return Result{}, fmt.Errorf("ratekit: memory store: algorithm %v: %w", q.Algorithm, ErrInvalidPolicy)
	}
	if err := checkCalendars(q.Rules); err != nil {
		return Result{}, fmt.Errorf("ratekit: memory store: %w", err)
	}
	var st states
	allowed, at := s.policy(q.Policy).decide(q, take, &st)
	return Result{Allowed: allowed, At: at, Rules: st.RuleStates, LockedFor: st.lock, Challenged: st.challenged}, nil
}

// Local implements [Local]: the store keeps its windows in this process.
func (*MemoryStore) Local() {}

// decide decides q on the policy's keys, writing the rule states to st.
func (p *memPolicy) decide(q *Query, take bool, st *states) (allowed bool, at int64) {
	var maxW int64
	for _, r := range q.Rules {
		maxW = max(maxW, r.Window.Microseconds())
	}
	now := q.Now
	if now == 0 {
		now = p.store.now()
	}
	more := q.Lockout.For > 0 || hasCalendar(q.Rules) || hasChallenge(q.Rules)
	sh, h := p.shard(q.Key)
	sh.mu.Lock()
	lg := sh.get(h, q.Key)
	if q.Now == 0 && lg != nil && lg.used > now {
		// The clock was read before the lock, outside the critical
		// section; a decision that got the lock after a later one takes
		// that one's time, so that the decisions of a key are in the
		// order of their times, as Redis reads TIME inside the script.
		now = lg.used
	}
	if q.Now == 0 && lg == nil && now <= sh.forgot {
		now = sh.forgot + 1 // after the decisions of a key reset (see refund)
	}
	switch {
	case more:
		allowed = p.decideMore(sh, h, lg, q, take, now, maxW, st)
	case q.Algorithm == SlidingBuckets:
		allowed = p.decideBuckets(sh, h, lg, q, take, now, maxW, st, challengeGate{})
	default:
		allowed = p.decideLog(sh, h, lg, q, take, now, maxW, st, challengeGate{})
	}
	if lg != nil && lg.used < now {
		lg.used = now
	}
	tick := sh.sweep(now)
	sh.mu.Unlock()
	p.store.shed(now)
	if tick {
		p.store.tick(now)
	}
	return allowed, now
}

// decideLog is decide for SlidingLog; sh.mu is held. gate, when set, is
// asked with the rule states before a take records units that fit every
// rule; when it says so, the request is challenged (st.challenged) and
// nothing is recorded.
func (p *memPolicy) decideLog(sh *memShard, h uint64, lg *memLog, q *Query, take bool, now, maxW int64, st *states, gate challengeGate) bool {
	rs := st.prepare(len(q.Rules))
	var allowed bool
	if lg == nil {
		allowed = evaluate(nil, q.Rules, q.N, now, rs)
	} else {
		// Written only when they change, here and below: the decisions
		// of a hot key in one microsecond leave the line of lg's fields
		// shared between the cores that take turns at its lock.
		if lg.used != now {
			lg.used = now
		}
		allowed = lg.evaluate(q.Rules, q.N, now, maxW, rs)
	}
	st.challenged = allowed && gate.reaches(rs)
	if take && allowed && !st.challenged {
		if lg == nil {
			lg = p.insert(sh, h, q.Key, now)
		}
		lg.add(now, q.N)
		if e := now + maxW; e > lg.expires {
			lg.expires = e
		}
		for i := range rs {
			if q.Rules[i].Calendar != 0 {
				continue // decideMore counts it
			}
			rs[i].Used += q.N
			rs[i].ResetAfter = time.Duration(q.Rules[i].Window.Microseconds()) * time.Microsecond
			if rs[i].NextAfter == 0 {
				rs[i].NextAfter = rs[i].ResetAfter
			}
		}
	}
	return allowed
}

// evaluate is the package's evaluate on the key's events, finding each
// window's start from where it was last time: a few steps forward at
// most, where a search from scratch would wander over events written a
// whole window ago. Events out of the longest window are dropped in whole
// chunks (see compact).
func (lg *memLog) evaluate(rules []Rule, n, now, maxW int64, states []RuleState) bool {
	head, end := int(lg.head), int(lg.n)
	allowed := true
	var newest, total int64
	if end > head {
		newest, total = lg.last, lg.lastCum
	}
	oldest := end // the start of the longest window
	for i, r := range rules {
		if r.Calendar != 0 {
			continue // decideMore counts it
		}
		w := r.Window.Microseconds()
		c, base, first := lg.startOf(i, now-w)
		oldest = min(oldest, c)
		var used int64
		if c < end {
			used = total - base
		}
		st := RuleState{Limit: r.Limit, Window: r.Window, Used: used}
		if used > 0 {
			st.ResetAfter = time.Duration(newest+w-now) * time.Microsecond
			st.NextAfter = time.Duration(first+w-now) * time.Microsecond
		}
		if need := used + n - r.Limit; need > 0 {
			allowed = false
			lg.flush()
			// The first event by which need units of the window have left.
			if j := lg.reaching(c, end, base+need); j < end {
				st.RetryAfter = time.Duration(lg.event(j).at+w-now) * time.Microsecond
			}
		}
		states[i] = st
	}
	if oldest > head {
		lg.head = int32(oldest)
		lg.compact()
	}
	return allowed
}

// event returns event i of the log.
func (lg *memLog) event(i int) *memEvent {
	return &lg.ev[i>>memChunkBits][i&(memChunkLen-1)]
}

// after returns the index of the first event of [lo, hi) after t, or hi.
func (lg *memLog) after(lo, hi int, t int64) int {
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if lg.event(m).at <= t {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// reaching returns the index of the first event of [lo, hi) whose running
// total reaches c, or hi.
func (lg *memLog) reaching(lo, hi int, c int64) int {
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if lg.event(m).cum < c {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// find finds the live event at time at.
func (lg *memLog) find(at int64) (int, bool) {
	i := lg.after(int(lg.head), int(lg.n), at-1)
	return i, i < int(lg.n) && lg.event(i).at == at
}

// startOf returns the index of the first event after cutoff, starting
// from rule i's hint, with the running total before it and its time when
// there is one: for the first rule, from the log's own fields while the
// window starts at the same event.
func (lg *memLog) startOf(i int, cutoff int64) (c int, base, first int64) {
	if i == 0 {
		if c := int(lg.cur[0]); lg.startPrev <= cutoff && cutoff < lg.startAt && c >= int(lg.head) && c < int(lg.n) {
			return c, lg.startBase, lg.startAt
		}
	}
	lg.flush()
	c = lg.start(i, cutoff)
	if c < int(lg.n) {
		e := lg.event(c)
		base, first = e.cum-e.n, e.at
		if i == 0 {
			lg.startAt, lg.startBase, lg.startPrev = first, base, math.MinInt64
			if c > int(lg.head) {
				lg.startPrev = lg.event(c - 1).at
			}
		}
	} else if i == 0 {
		lg.startAt = math.MinInt64
	}
	return c, base, first
}

// start returns the index of the first event after cutoff, starting from
// rule i's hint.
func (lg *memLog) start(i int, cutoff int64) int {
	head, n := int(lg.head), int(lg.n)
	c := head
	if i < len(lg.cur) && int(lg.cur[i]) > c && int(lg.cur[i]) <= n {
		c = int(lg.cur[i])
	}
	if c > head && lg.event(c-1).at > cutoff {
		// The hint is past the window's start (the clock stepped back).
		c = lg.after(head, c, cutoff)
	} else {
		for steps := 0; c < n && lg.event(c).at <= cutoff; steps++ {
			if steps == 8 {
				c = lg.after(c, n, cutoff)
				break
			}
			c++
		}
	}
	if i < len(lg.cur) && int(lg.cur[i]) != c {
		lg.cur[i] = int32(c)
	}
	return c
}

// compact drops the chunks whose events are all dead once they are a
// quarter of the chunks or more (so that moving the chunks costs O(1) per
// chunk), keeping up to memSpareChunks of them for the events to come; a
// log with nothing live keeps its first chunk only.
func (lg *memLog) compact() {
	if lg.head == lg.n {
		if len(lg.ev) > 1 {
			clear(lg.ev[1:])
			lg.ev = lg.ev[:1]
		}
		lg.n, lg.head = 0, 0
		lg.cur = [inlineRules]int32{}
		lg.startAt = math.MinInt64
		return
	}
	k := int(lg.head) >> memChunkBits
	if k == 0 || k*4 < len(lg.ev) {
		return
	}
	// Rotate the k dead chunks (each full, memChunkLen long) to the end.
	ev := lg.ev
	slices.Reverse(ev[:k])
	slices.Reverse(ev[k:])
	slices.Reverse(ev)
	d := int32(k << memChunkBits)
	lg.n -= d
	lg.head -= d
	if lg.cur[0] < d {
		lg.startAt = math.MinInt64 // its event was dropped
	}
	for i := range lg.cur {
		lg.cur[i] = max(0, lg.cur[i]-d)
	}
	if keep := (int(lg.n)+memChunkLen-1)>>memChunkBits + memSpareChunks; len(ev) > keep {
		clear(ev[keep:])
		lg.ev = ev[:keep]
	}
}

// flush writes the newest event's units and running total to its chunk
// (see memLog.lastN), for the events to be read; only when they changed,
// so that the denials of a hot key, which read the events, leave the
// chunk's lines shared between the cores.
func (lg *memLog) flush() {
	if lg.n > lg.head {
		if e := lg.event(int(lg.n) - 1); e.cum != lg.lastCum || e.n != lg.lastN {
			e.n, e.cum = lg.lastN, lg.lastCum
		}
	}
}

// push appends e to the log.
func (lg *memLog) push(e memEvent) {
	lg.flush()
	i := int(lg.n)
	k, o := i>>memChunkBits, i&(memChunkLen-1)
	switch {
	case k == len(lg.ev):
		size := memChunkLen
		if k == 0 {
			size = 4 // a key's first events
		}
		lg.ev = append(lg.ev, make([]memEvent, size))
	case o == len(lg.ev[k]):
		// The first chunk, the only one, is full: double it.
		lg.ev[k] = append(lg.ev[k], make([]memEvent, o)...)
	}
	lg.ev[k][o] = e
	lg.n++
	lg.last, lg.lastN, lg.lastCum = e.at, e.n, e.cum
}

// insert adds a key to the shard; sh.mu is held. The caller calls
// MemoryStore.shed once it has released sh.mu. The key is copied: the
// caller's string may live in a buffer that is reused after the request
// (fasthttp's, an unsafe conversion), and a key that changed under the
// store would be found no more, its window lost.
func (p *memPolicy) insert(sh *memShard, h uint64, key string, now int64) *memLog {
	key = strings.Clone(key)
	p.keys.Add(1)
	p.store.keys.Add(1)
	var lg *memLog
	if n := len(sh.free); n > 0 {
		lg = sh.free[n-1]
		sh.free[n-1] = nil
		sh.free = sh.free[:n-1]
		lg.key, lg.index, lg.used = key, int32(len(sh.keys)), now
	} else {
		lg = &memLog{key: key, index: int32(len(sh.keys)), used: now}
	}
	lg.born = max(now, sh.forgot+1)
	lg.next = sh.m[h]
	sh.m[h] = lg
	sh.keys = append(sh.keys, memSlot{lg: lg, hash: h})
	return lg
}

// shed forgets keys while the store holds more than its bound (see
// WithMaxKeys), from the policy holding the most keys: the least recently
// used of a sample of a shard, keys locked out spared unless the store
// holds twice its bound. One goroutine sheds at a time, the others go on;
// no shard lock is held.
func (s *MemoryStore) shed(now int64) {
	if s.keys.Load() <= s.maxKeys || !s.shedding.TryLock() {
		return
	}
	defer s.shedding.Unlock()
	for range 8 {
		over := s.keys.Load() - s.maxKeys
		if over <= 0 {
			return
		}
		p := s.heaviest()
		if p == nil || !p.evictOne(now, over >= s.maxKeys) {
			return
		}
	}
}

// heaviest returns the policy holding the most keys.
func (s *MemoryStore) heaviest() *memPolicy {
	var top *memPolicy
	for _, p := range *s.list.Load() {
		if top == nil || p.keys.Load() > top.keys.Load() {
			top = p
		}
	}
	return top
}

// evictOne forgets the least recently used of a few keys of a few shards
// of the policy, sparing keys locked out at now unless evenLocked; it
// reports whether it forgot one.
func (p *memPolicy) evictOne(now int64, evenLocked bool) bool {
	start := rand.IntN(memShards)
	for i := range 4 {
		sh := &p.shards[(start+i*memShards/4)%memShards]
		sh.mu.Lock()
		var victim *memLog
		for range min(8, len(sh.keys)) {
			k := sh.keys[rand.IntN(len(sh.keys))].lg
			if (evenLocked || k.lock <= now) && (victim == nil || k.used < victim.used) {
				victim = k
			}
		}
		if victim != nil {
			sh.forgot = max(sh.forgot, victim.used)
			sh.remove(victim)
		}
		sh.mu.Unlock()
		if victim != nil {
			return true
		}
	}
	return false
}

// remove deletes lg from the shard; sh.mu is held.
func (sh *memShard) remove(lg *memLog) {
	sh.policy.keys.Add(-1)
	sh.policy.store.keys.Add(-1)
	h := sh.keys[lg.index].hash
	switch head := sh.m[h]; {
	case head == lg && lg.next == nil:
		delete(sh.m, h)
	case head == lg:
		sh.m[h] = lg.next
	default:
		for k := head; k != nil; k = k.next {
			if k.next == lg {
				k.next = lg.next
				break
			}
		}
	}
	last := len(sh.keys) - 1
	sh.keys[lg.index] = sh.keys[last]
	sh.keys[lg.index].lg.index = lg.index
	sh.keys[last] = memSlot{}
	sh.keys = sh.keys[:last]
	if len(sh.free) < memFree {
		var ev [][]memEvent
		if len(lg.ev) == 1 && cap(lg.ev) <= 4 {
			ev = lg.ev // one chunk: memChunkLen events at most
		}
		*lg = memLog{ev: ev}
		sh.free = append(sh.free, lg)
	}
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
		if r.Calendar != 0 {
			continue // decideMore counts it
		}
		w := r.Window.Microseconds()
		idx := after(ev, now-w)
		var used, base int64
		if idx < len(ev) {
			base = ev[idx].cum - ev[idx].n
			used = total - base
		}
		st := RuleState{Limit: r.Limit, Window: r.Window, Used: used}
		if used > 0 {
			st.ResetAfter = time.Duration(newest+w-now) * time.Microsecond
			st.NextAfter = time.Duration(ev[idx].at+w-now) * time.Microsecond
		}
		if need := used + n - r.Limit; need > 0 {
			allowed = false
			// The first event by which need units of the window have left.
			j := idx + reaching(ev[idx:], base+need)
			if j < len(ev) {
				st.RetryAfter = time.Duration(ev[j].at+w-now) * time.Microsecond
			}
		}
		states[i] = st
	}
	return allowed
}

// after returns the index of the first event after t.
func after(ev []memEvent, t int64) int {
	lo, hi := 0, len(ev)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if ev[m].at <= t {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// reaching returns the index of the first event whose running total
// reaches c.
func reaching(ev []memEvent, c int64) int {
	lo, hi := 0, len(ev)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if ev[m].cum < c {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// add records n units at time at, keeping events sorted and merged.
func (lg *memLog) add(at, n int64) {
	l := int(lg.n)
	if l == int(lg.head) {
		lg.push(memEvent{at: at, n: n, cum: n})
		return
	}
	switch {
	case lg.last < at:
		lg.push(memEvent{at: at, n: n, cum: lg.lastCum + n})
		return
	case lg.last == at:
		lg.lastN += n
		lg.lastCum += n
		return
	}
	lg.flush()
	// An injected clock stepped back: insert in order, then fix the
	// running totals after the insertion point.
	i, found := lg.find(at)
	if found {
		lg.event(i).n += n
	} else {
		lg.push(memEvent{})
		for j := int(lg.n) - 1; j > i; j-- {
			*lg.event(j) = *lg.event(j - 1)
		}
		*lg.event(i) = memEvent{at: at, n: n}
		lg.cur = [inlineRules]int32{}
	}
	lg.recount(i)
}

// recount recomputes the running totals from event i on, the newest
// event being in its chunk (flush); the first rule's window start is
// found afresh next time.
func (lg *memLog) recount(i int) {
	lg.startAt = math.MinInt64
	// Only differences of totals are read, so any base will do.
	var cum int64
	if i > int(lg.head) {
		cum = lg.event(i - 1).cum
	}
	for j := i; j < int(lg.n); j++ {
		e := lg.event(j)
		cum += e.n
		e.cum = cum
	}
	if lg.n > lg.head {
		e := lg.event(int(lg.n) - 1)
		lg.last, lg.lastN, lg.lastCum = e.at, e.n, e.cum
	}
}

// sweep looks at a few keys every so many operations of the shard and
// deletes the expired ones, going round the shard's keys in turn, so that
// every key is looked at within len(keys)/2 operations of the shard:
// more than a stream of keys each seen once can add. It reports when
// the store's sweep is due (tick): every 16 operations of the shard too,
// half-way between its own.
func (sh *memShard) sweep(now int64) (tick bool) {
	sh.ops++
	if sh.ops%16 == 0 {
		sh.sweepSome(now, 32)
	}
	return sh.ops%16 == 8
}

// sweepSome looks at up to limit keys from the cursor on and deletes the
// expired ones: their bounds first, the window of a key whose bound has
// passed next.
func (sh *memShard) sweepSome(now int64, limit int) {
	for range min(limit, len(sh.keys)) {
		if sh.cursor >= len(sh.keys) {
			sh.cursor = 0
		}
		k := &sh.keys[sh.cursor]
		if k.expires <= now {
			if k.lg.expires <= now {
				sh.remove(k.lg) // the last key moves to the cursor
				continue
			}
			k.expires = k.lg.expires
		}
		sh.cursor++
	}
}

// tick sweeps the shards of every policy in turn, 64 keys every 16
// decisions store-wide (each shard's decisions call it one time in 16),
// so that keys of a policy that sees no more traffic are still emptied:
// every key is looked at within about keys/4 decisions of the store. It
// runs outside any shard lock.
func (s *MemoryStore) tick(now int64) {
	list := *s.list.Load()
	n := s.tickN.Add(1)
	p := list[int(n/memShards)%len(list)]
	sh := &p.shards[n%memShards]
	sh.mu.Lock()
	sh.sweepSome(now, 64)
	sh.mu.Unlock()
}

// Refund implements [Store].
func (s *MemoryStore) Refund(ctx context.Context, q Query, at int64) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ratekit: memory store: %w", err)
	}
	s.policy(q.Policy).refund(&q, at)
	return nil
}

// refund gives back q.N units recorded at time at, unless the key was
// reset (or forgotten) since: its units then went with it.
func (p *memPolicy) refund(q *Query, at int64) {
	sh, h := p.shard(q.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	lg := sh.get(h, q.Key)
	if lg == nil || at < lg.born {
		return
	}
	if hasCalendar(q.Rules) {
		lg.refundPeriods(q, at)
	}
	if q.Algorithm == SlidingBuckets {
		for i, r := range q.Rules {
			if r.Calendar != 0 {
				continue
			}
			g := q.bucketWidth(r)
			if b := lg.bucketsOf(g, false); b != nil && !sharesWidth(q, i, g) {
				b.b = bucketAdd(b.b, at/g, -q.N)
			}
		}
		return
	}
	lg.flush()
	i, found := lg.find(at)
	if !found {
		return
	}
	e := lg.event(i)
	e.n -= min(q.N, e.n)
	if e.n == 0 {
		for j := i + 1; j < int(lg.n); j++ {
			*lg.event(j - 1) = *lg.event(j)
		}
		lg.n--
		lg.cur = [inlineRules]int32{}
	}
	lg.recount(i)
}

// sharesWidth reports whether a rule before rule i has bucket width g, so
// that its buckets were already counted.
func sharesWidth(q *Query, i int, g int64) bool {
	for _, r := range q.Rules[:i] {
		if r.Calendar == 0 && q.bucketWidth(r) == g {
			return true
		}
	}
	return false
}

// len returns the number of keys the store holds, swept or not yet.
func (s *MemoryStore) len() int { return int(s.keys.Load()) }

// decideBuckets is decide for SlidingBuckets: each rule's window is split
// into buckets of width g, kept per width so that rules of one width (and
// tiers of one window) share them; the bucket holding the window's start
// is counted in full, so the count never falls short of the true sliding
// count. sh.mu is held.
func (p *memPolicy) decideBuckets(sh *memShard, h uint64, lg *memLog, q *Query, take bool, now, maxW int64, st *states, gate challengeGate) bool {
	rs := st.prepare(len(q.Rules))
	var scratch memLog
	view := lg
	if view == nil {
		view = &scratch
	} else {
		view.used = now
	}
	allowed := true
	var maxG int64
	for i, r := range q.Rules {
		if r.Calendar != 0 {
			continue // decideMore counts it
		}
		g := q.bucketWidth(r)
		maxG = max(maxG, g)
		var bk []memEvent
		if bs := view.bucketsOf(g, false); bs != nil {
			// Drop the buckets older than every window of this width.
			lo := (now - longestOfWidth(q, g)) / g
			b := bs.b
			k := 0
			for k < len(b) && b[k].at < lo {
				k++
			}
			if k > 0 {
				b = append(b[:0], b[k:]...)
				bs.b = b
			}
			bk = b
		}
		rs[i] = bucketState(bk, r, g, q.N, now)
		if rs[i].RetryAfter > 0 {
			allowed = false
		}
	}
	st.challenged = allowed && gate.reaches(rs)
	if take && allowed && !st.challenged {
		if lg == nil {
			lg = p.insert(sh, h, q.Key, now)
		}
		for i, r := range q.Rules {
			if r.Calendar != 0 {
				continue
			}
			g := q.bucketWidth(r)
			if !sharesWidth(q, i, g) {
				bs := lg.bucketsOf(g, true)
				bs.b = bucketAdd(bs.b, now/g, q.N)
			}
			rs[i].Used += q.N
			rs[i].ResetAfter = time.Duration((now/g+1)*g+r.Window.Microseconds()-now) * time.Microsecond
			if rs[i].NextAfter == 0 {
				rs[i].NextAfter = rs[i].ResetAfter
			}
		}
		lg.expires = max(lg.expires, now+maxW+maxG)
	}
	return allowed
}

// longestOfWidth returns the longest window of the rules of q whose
// buckets are g wide.
func longestOfWidth(q *Query, g int64) int64 {
	var w int64
	for _, r := range q.Rules {
		if r.Calendar == 0 && q.bucketWidth(r) == g {
			w = max(w, r.Window.Microseconds())
		}
	}
	return w
}

// bucketsOf returns the buckets of width g, adding them when add is set;
// nil when there are none.
func (lg *memLog) bucketsOf(g int64, add bool) *memBuckets {
	if lg.x != nil {
		for j := range lg.x.bk {
			if lg.x.bk[j].width == g {
				return &lg.x.bk[j]
			}
		}
	}
	if !add {
		return nil
	}
	x := lg.more()
	x.bk = append(x.bk, memBuckets{width: g})
	return &x.bk[len(x.bk)-1]
}

// bucketState computes a rule's state over its live buckets bk (sorted by
// index, width g) for n more units at now.
func bucketState(bk []memEvent, r Rule, g, n, now int64) RuleState {
	w := r.Window.Microseconds()
	lo := (now - w) / g
	st := RuleState{Limit: r.Limit, Window: r.Window}
	k := 0
	for k < len(bk) && bk[k].at < lo {
		k++
	}
	bk = bk[k:]
	for _, b := range bk {
		st.Used += b.n
	}
	if len(bk) > 0 {
		st.ResetAfter = time.Duration((bk[len(bk)-1].at+1)*g+w-now) * time.Microsecond
		st.NextAfter = time.Duration((bk[0].at+1)*g+w-now) * time.Microsecond
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

// decideMore is decide for a policy with calendar rules, a lockout or a
// challenge; sh.mu is held. A key locked out, a calendar rule without
// room, or a request challenged leaves the sliding rules peeked at; a
// take that every rule admits is counted in the calendar periods too; a
// take that a rule denies starts a lockout (a challenged one does not).
func (p *memPolicy) decideMore(sh *memShard, h uint64, lg *memLog, q *Query, take bool, now, maxW int64, st *states) bool {
	var lock int64
	if lg != nil && lg.lock > now {
		lock = lg.lock - now
	}
	// The calendar rules' states, kept aside: the sliding decision
	// prepares st afresh. A valid policy has at most one rule per period.
	var calBuf [3]RuleState
	var endBuf [3]int64
	cal, ends, sliding, fits := lg.periods(q, now, calBuf[:0], endBuf[:0])
	var gate challengeGate
	if lock == 0 && fits && hasChallenge(q.Rules) && (lg == nil || lg.pass <= now) {
		gate = challengeGate{q: q, cal: cal} // no pass: what fits may reach a threshold
	}
	takeSliding := take && lock == 0 && fits
	allowed := true
	switch {
	case !sliding:
		st.prepare(len(q.Rules))
		st.challenged = gate.reaches(nil)
	case q.Algorithm == SlidingBuckets:
		allowed = p.decideBuckets(sh, h, lg, q, takeSliding, now, maxW, st, gate)
	default:
		allowed = p.decideLog(sh, h, lg, q, takeSliding, now, maxW, st, gate)
	}
	challenged := st.challenged
	allowed = allowed && fits && lock == 0 && !challenged
	if take && (allowed && len(cal) > 0 || !allowed && !challenged && lock == 0 && q.Lockout.For > 0) {
		if lg = sh.get(h, q.Key); lg == nil {
			lg = p.insert(sh, h, q.Key, now)
		}
		if allowed {
			for i := range cal {
				lg.periodAdd(cal[i].Used, now, ends[i], cal[i].Window, q.N)
				cal[i].Used += q.N
				lg.expires = max(lg.expires, ends[i])
			}
		} else {
			lock = lg.lockout(q.Lockout, now)
			lg.expires = max(lg.expires, lg.lockKeep)
		}
	}
	rs := st.slice()
	nc := 0
	for i, r := range q.Rules {
		if r.Calendar != 0 {
			rs[i] = cal[nc]
			nc++
		}
	}
	st.lock = time.Duration(lock) * time.Microsecond
	st.challenged = challenged
	return allowed
}

// challengeGate decides whether a request that fits every rule of q is
// challenged: a key without a pass, whose calendar rules' states are cal.
// The zero gate (a policy without a Challenge, or a key that passed)
// challenges nothing.
type challengeGate struct {
	q   *Query
	cal []RuleState
}

// reaches reports whether q.N more units would bring a rule with a
// Challenge to it, given the sliding rules' states rs (nil when the
// policy has none) and the calendar rules' in g.cal.
func (g challengeGate) reaches(rs []RuleState) bool {
	if g.q == nil {
		return false
	}
	nc := 0
	for i, r := range g.q.Rules {
		var used int64
		if r.Calendar != 0 {
			used = g.cal[nc].Used
			nc++
		} else {
			used = rs[i].Used
		}
		if r.Challenge > 0 && used+g.q.N >= r.Challenge {
			return true
		}
	}
	return false
}

// Pass implements [Challenges].
func (s *MemoryStore) Pass(ctx context.Context, q Query) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ratekit: memory store: %w", err)
	}
	if err := checkCalendars(q.Rules); err != nil {
		return fmt.Errorf("ratekit: memory store: %w", err)
	}
	s.policy(q.Policy).pass(&q)
	return nil
}

// pass records that q.Key passed a challenge at q.Now, or at the store's
// time (see [Challenges]).
func (p *memPolicy) pass(q *Query) {
	now := q.Now
	if now == 0 {
		now = p.store.now()
	}
	sh, h := p.shard(q.Key)
	sh.mu.Lock()
	lg := sh.get(h, q.Key)
	if q.Now == 0 && lg != nil && lg.used > now {
		now = lg.used // keep the key's times in order (see decide)
	}
	if q.Now == 0 && lg == nil && now <= sh.forgot {
		now = sh.forgot + 1 // see decide
	}
	if lg == nil {
		lg = p.insert(sh, h, q.Key, now)
	}
	lg.used = max(lg.used, now)
	lg.pass = max(lg.pass, passUntil(q.Rules, now))
	lg.expires = max(lg.expires, lg.pass)
	sh.sweep(now)
	sh.mu.Unlock()
	p.store.shed(now)
}

// periods returns the states of q's calendar rules at now, appended to
// cal, with the ends of their periods appended to ends; whether q has
// sliding rules; and whether q.N more units fit every calendar rule. lg
// may be nil.
func (lg *memLog) periods(q *Query, now int64, cal []RuleState, ends []int64) (_ []RuleState, _ []int64, sliding, fits bool) {
	fits = true
	for _, r := range q.Rules {
		if r.Calendar == 0 {
			sliding = true
			continue
		}
		start, end := r.Calendar.period(r.Location, now)
		used := lg.periodUsed(start, end)
		s := RuleState{Limit: r.Limit, Window: time.Duration(end-start) * time.Microsecond, Calendar: r.Calendar,
			Used: used, ResetAfter: time.Duration(end-now) * time.Microsecond}
		s.NextAfter = s.ResetAfter
		if used+q.N > r.Limit {
			fits = false
			s.RetryAfter = s.ResetAfter
		}
		cal, ends = append(cal, s), append(ends, end)
	}
	return cal, ends, sliding, fits
}

// periodUsed returns the units lg holds in the period [start, end); lg
// may be nil.
func (lg *memLog) periodUsed(start, end int64) int64 {
	if lg == nil || lg.x == nil {
		return 0
	}
	for _, c := range lg.x.cal {
		if c.start == start && c.end == end {
			return c.n
		}
	}
	return 0
}

// periodAdd adds n units to the period of length w ending at end, which
// held used; periods that have ended are dropped when a new one begins.
func (lg *memLog) periodAdd(used, now, end int64, w time.Duration, n int64) {
	start := end - w.Microseconds()
	x := lg.more()
	if used > 0 {
		for i := range x.cal {
			if c := &x.cal[i]; c.start == start && c.end == end {
				c.n += n
				return
			}
		}
	}
	x.cal = slices.DeleteFunc(x.cal, func(c memPeriod) bool { return c.end <= now || c.start == start && c.end == end })
	x.cal = append(x.cal, memPeriod{start: start, end: end, n: n})
}

// refundPeriods gives q.N units back to the calendar periods that held
// time at.
func (lg *memLog) refundPeriods(q *Query, at int64) {
	for _, r := range q.Rules {
		if r.Calendar == 0 {
			continue
		}
		if lg.x == nil {
			return
		}
		start, end := r.Calendar.period(r.Location, at)
		for i := range lg.x.cal {
			if c := &lg.x.cal[i]; c.start == start && c.end == end {
				c.n -= min(q.N, c.n)
				break
			}
		}
	}
}

// lockout locks lg out from now under lo and returns for how long, in µs.
func (lg *memLog) lockout(lo Lockout, now int64) int64 {
	if lg.lockKeep <= now {
		lg.offences = 0 // forgotten
	}
	d := lockoutFor(lo, int64(lg.offences))
	lg.offences = min(lg.offences+1, maxOffences)
	lg.lock = now + d
	lg.lockKeep = lg.lock
	if lo.Max > lo.For {
		lg.lockKeep += lo.Max.Microseconds()
	}
	return d
}

// maxOffences bounds the offence count a lockout keeps: past it the
// lockout has long reached Lockout.Max.
const maxOffences = 62

// lockoutFor returns, in µs, how long a lockout after offences earlier
// ones lasts: For, doubled per earlier offence up to Max when Max is
// above For.
func lockoutFor(lo Lockout, offences int64) int64 {
	d, m := lo.For.Microseconds(), lo.Max.Microseconds()
	if m <= d {
		return d
	}
	for range offences {
		if d >= m/2 {
			return m
		}
		d *= 2
	}
	return d
}

// record adds q.N units to q.Key's windows and calendar periods at the
// store's time, whatever the rules say, and returns that time: the units
// a shared store admitted, mirrored in a limiter's fallback store so that
// a fallback starts from them. The store admitted them within the rules,
// so the key never holds more live units than a rule's limit.
func (p *memPolicy) record(q *Query) int64 {
	now := p.store.now()
	sh, h := p.shard(q.Key)
	sh.mu.Lock()
	lg := sh.get(h, q.Key)
	if lg != nil && lg.used > now {
		now = lg.used // keep the key's times in order (see decide)
	}
	if lg == nil && now <= sh.forgot {
		now = sh.forgot + 1 // see decide
	}
	if lg == nil {
		lg = p.insert(sh, h, q.Key, now)
	}
	lg.used = now
	var maxW, maxG int64
	for i, r := range q.Rules {
		if r.Calendar != 0 {
			start, end := r.Calendar.period(r.Location, now)
			lg.periodAdd(lg.periodUsed(start, end), now, end, time.Duration(end-start)*time.Microsecond, q.N)
			lg.expires = max(lg.expires, end)
			continue
		}
		maxW = max(maxW, r.Window.Microseconds())
		if q.Algorithm != SlidingBuckets {
			continue
		}
		g := q.bucketWidth(r)
		maxG = max(maxG, g)
		if !sharesWidth(q, i, g) {
			bs := lg.bucketsOf(g, true)
			b := bs.b
			k := 0
			for k < len(b) && b[k].at < (now-longestOfWidth(q, g))/g {
				k++ // out of every window of this width
			}
			bs.b = bucketAdd(append(b[:0], b[k:]...), now/g, q.N)
		}
	}
	if q.Algorithm == SlidingLog && maxW > 0 {
		// Drop what left the longest window, as an evaluation would.
		if c := lg.after(int(lg.head), int(lg.n), now-maxW); c > int(lg.head) {
			lg.head = int32(c)
			lg.compact()
		}
		lg.add(now, q.N)
	}
	lg.expires = max(lg.expires, now+maxW+maxG)
	sh.sweep(now)
	sh.mu.Unlock()
	p.store.shed(now)
	return now
}

// lockFor locks q.Key out for d from now, unless it is locked out longer
// already: a lockout a shared store reported, mirrored in a limiter's
// fallback store.
func (p *memPolicy) lockFor(q *Query, d time.Duration) {
	now := p.store.now()
	sh, h := p.shard(q.Key)
	sh.mu.Lock()
	lg := sh.get(h, q.Key)
	if lg == nil {
		lg = p.insert(sh, h, q.Key, now)
		lg.used = now
	}
	lg.lock = max(lg.lock, now+d.Microseconds())
	lg.lockKeep = max(lg.lockKeep, lg.lock)
	lg.expires = max(lg.expires, lg.lock)
	sh.mu.Unlock()
	p.store.shed(now)
}

// lift lifts key's lockout and forgets its pass, if it has them: what
// an instance's fallback store mirrored of a key reset or refunded
// elsewhere. Forgetting a pass can only challenge more.
func (p *memPolicy) lift(key string) {
	sh, h := p.shard(key)
	sh.mu.Lock()
	if lg := sh.get(h, key); lg != nil {
		lg.lock, lg.pass = 0, 0
	}
	sh.mu.Unlock()
}

// passUntil returns, in µs, when a challenge passed at now (µs) ends
// under rules: once the longest window of the rules with a Challenge has
// passed, or the current period of such a calendar rule has ended,
// whichever is later; now itself when no rule has a Challenge.
func passUntil(rules []Rule, now int64) int64 {
	until := now
	for _, r := range rules {
		switch {
		case r.Challenge <= 0:
		case r.Calendar != 0:
			_, end := r.Calendar.period(r.Location, now)
			until = max(until, end)
		default:
			until = max(until, now+r.Window.Microseconds())
		}
	}
	return until
}

// AddRefused implements [Refusals].
func (s *MemoryStore) AddRefused(ctx context.Context, policy string, refused []RefusedKey) error {
	return s.refused.AddRefused(ctx, policy, refused)
}

// TopRefused implements [Refusals].
func (s *MemoryStore) TopRefused(ctx context.Context, policy string, n int) ([]RefusedKey, error) {
	return s.refused.TopRefused(ctx, policy, n)
}
