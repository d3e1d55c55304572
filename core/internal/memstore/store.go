package memstore

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

	"github.com/ratekit/ratekit/core/driver"
)

// memShards is the number of locks a policy's keys are spread over.
const memShards = 64

// defaultMaxKeys bounds a Store unless WithMaxKeys sets another.
const defaultMaxKeys = 1 << 20

// Store is a [driver.Store] that keeps windows in this process, with the
// same semantics as the Redis drivers (package redisstore): core's
// MemoryStore, the store for a single instance and the local fallback of
// a limiter (FailLocal).
//
// A decision hashes its key once, takes one of 64 locks of its policy and
// allocates nothing. Idle keys are swept as the store is used, without a
// background goroutine: every key is looked at within a bounded number of
// operations, so memory follows the keys active within their longest
// window. The number of keys is bounded too ([WithMaxKeys]). It keeps the
// refusals its limiters count, per minute and bounded as the Redis drivers
// keep them ([driver.Refusals]). A Store is safe for concurrent use; its
// zero value is not usable, call [New].
type Store struct {
	base      time.Time // monotonic time at start
	baseMicro int64     // wall time at start, µs
	seed      maphash.Seed
	maxKeys   int64
	keys      atomic.Int64 // keys held, in every policy
	shedding  sync.Mutex   // held by the one goroutine making room

	mu       sync.Mutex
	policies map[string]*Policy
	byName   atomic.Pointer[map[string]*Policy] // policies, read without the lock
	list     atomic.Pointer[[]*Policy]          // the policies, for sweeping
	leases   sync.Map                           // policy name -> *Leases (Policy.InFlight)
	refused  *RefusalLog                        // the refusals of its limiters (Refusals)
	// tickN is written by every core (tick), in a line of its own, so
	// that the fields a decision reads stay in its core's cache.
	_     [64]byte
	tickN atomic.Uint64
	_     [56]byte
}

var _ driver.LocalProfile = (*Store)(nil)

// Option configures a [Store].
type Option func(*options)

type options struct {
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
func WithMaxKeys(n int) Option {
	return func(o *options) { o.maxKeys = n }
}

// Policy holds the keys of one policy.
type Policy struct {
	shards [memShards]memShard
	name   string
	store  *Store
	keys   atomic.Int64 // keys held
	grants grantSet     // the keys' grants (grant.go)
}

// memShard is the keys of a policy whose hashes fall on it, under a lock
// of its own. What a decision uses comes first, and each shard fills 128
// bytes (two cache lines, as the adjacent-line prefetcher pairs them), so
// that the locks of two shards never share a cache line.
type memShard struct {
	mu     sync.Mutex
	ops    uint32
	tab    memTable // the keys by their hashes, keys of one hash chained (memLog.next)
	policy *Policy
	// forgot is the latest decision time of a key reset or evicted: a
	// key made again is born after it, so that a refund of a decision
	// made before the reset does nothing.
	forgot int64
	keys   []memSlot // every key of the shard, for sweeping in turn
	cursor int
	free   []*memLog // removed logs, for new keys to reuse
	_      [8]byte
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

// New returns an empty in-process store.
func New(opts ...Option) *Store {
	o := options{maxKeys: defaultMaxKeys}
	for _, opt := range opts {
		opt(&o)
	}
	if o.maxKeys < 1 {
		panic(fmt.Sprintf("ratekit: New: WithMaxKeys(%d): must be at least 1", o.maxKeys))
	}
	// Wall time at start plus monotonic time since, so that a wall clock
	// step cannot move the windows.
	base := time.Now()
	s := &Store{base: base, baseMicro: base.UnixMicro(), seed: maphash.MakeSeed(),
		maxKeys: int64(o.maxKeys), policies: make(map[string]*Policy)}
	s.refused = NewRefusalLog(s.now)
	s.list.Store(new([]*Policy))
	s.byName.Store(&map[string]*Policy{})
	return s
}

// now returns the store's clock in µs.
func (s *Store) now() int64 { return s.baseMicro + time.Since(s.base).Microseconds() }

// policy returns the keys of a policy, created on first use.
func (s *Store) policy(name string) *Policy {
	if p := (*s.byName.Load())[name]; p != nil {
		return p // the common case: no lock
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.policies[name]
	if p == nil {
		p = &Policy{name: name, store: s}
		for i := range p.shards {
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

// PolicyOf returns the keys of policy name when store is a *Store itself
// (not a type wrapping one, whose Take may do more), for a limiter on it
// to decide in place: as Take does, without the copies of the Store
// interface's values. It returns nil for any other store. A limiter's
// FailLocal fallback store reaches its policy's keys through it too.
func PolicyOf(store driver.Store, name string) *Policy {
	if s, ok := store.(*Store); ok {
		return s.policy(name)
	}
	return nil
}

// shard returns the shard of key and the key's hash, which finds it in
// the shard (memShard.get): a key is hashed once.
func (p *Policy) shard(key string) (*memShard, uint64) {
	h := maphash.String(p.store.seed, key)
	return &p.shards[h%memShards], h
}

// get returns the window of key, whose hash is h, or nil; sh.mu is held.
func (sh *memShard) get(h uint64, key string) *memLog {
	for lg := sh.tab.head(h); lg != nil; lg = lg.next {
		if lg.key == key {
			return lg
		}
	}
	return nil
}

// Take implements [driver.Store].
func (s *Store) Take(ctx context.Context, q driver.Query) (driver.Result, error) {
	return s.result(ctx, &q, true)
}

// Peek implements [driver.Store].
func (s *Store) Peek(ctx context.Context, q driver.Query) (driver.Result, error) {
	return s.result(ctx, &q, false)
}

func (s *Store) result(ctx context.Context, q *driver.Query, take bool) (driver.Result, error) {
	if err := ctx.Err(); err != nil {
		return driver.Result{}, fmt.Errorf("memory store: %w", err)
	}
	if q.Algorithm != driver.SlidingLog && q.Algorithm != driver.SlidingBuckets {
		return driver.Result{}, fmt.Errorf("memory store: algorithm %v: %w", q.Algorithm, driver.ErrInvalidQuery)
	}
	if err := driver.CheckRules(q.Rules); err != nil {
		return driver.Result{}, fmt.Errorf("memory store: %w", err)
	}
	var st driver.Result
	s.policy(q.Policy).Decide(q, take, &st)
	return st, nil
}

// Local implements [driver.Local]: the store keeps its windows in this process.
func (*Store) Local() {}

// Decide decides q on the policy's keys (a Take when take is set, else a
// Peek) and writes the answer to st, in place: what Take and Peek return,
// without the copies of the Store interface's values.
func (p *Policy) Decide(q *driver.Query, take bool, st *driver.Result) {
	if p.grants.n.Load() > 0 && p.granted(q, take, st) {
		return
	}
	p.decide(q, take, st)
}

// decide is Decide of a key as the rules say, whatever its grant.
func (p *Policy) decide(q *driver.Query, take bool, st *driver.Result) {
	var allowed bool
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
	if q.Now == 0 {
		now = keyTime(sh, lg, now)
	}
	switch {
	case more:
		allowed = p.decideMore(sh, h, lg, q, take, now, maxW, st)
	case q.Algorithm == driver.SlidingBuckets:
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
	st.Allowed, st.At = allowed, now
}

// keyTime returns the time of a decision of lg's key (nil: a key sh
// holds nothing of) whose clock, read before the lock, said now. The
// clock was read outside the critical section: a decision that got the
// lock after a later one takes that one's time, so that the decisions of
// a key are in the order of their times, as Redis reads TIME inside the
// script; and a new key's decisions come after those of a key reset (see
// refund).
func keyTime(sh *memShard, lg *memLog, now int64) int64 {
	switch {
	case lg != nil && lg.used > now:
		return lg.used
	case lg == nil && now <= sh.forgot:
		return sh.forgot + 1
	}
	return now
}

// insert adds a key to the shard; sh.mu is held. The caller calls
// Store.shed once it has released sh.mu. The key is copied: the
// caller's string may live in a buffer that is reused after the request
// (fasthttp's, an unsafe conversion), and a key that changed under the
// store would be found no more, its window lost.
func (p *Policy) insert(sh *memShard, h uint64, key string, now int64) *memLog {
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
	lg.born = now
	lg.startAt = math.MinInt64 // the first rule's window start not known (startOf)
	sh.tab.push(h, lg)
	sh.keys = append(sh.keys, memSlot{lg: lg, hash: h})
	return lg
}

// shed forgets keys while the store holds more than its bound (see
// WithMaxKeys), from the policy holding the most keys: the least recently
// used of a sample of a shard, keys locked out spared unless the store
// holds twice its bound. One goroutine sheds at a time, the others go on;
// no shard lock is held.
func (s *Store) shed(now int64) {
	if s.keys.Load() > s.maxKeys {
		s.shedSome(now) // the rest apart, for this check to be inlined
	}
}

// shedSome is shed once the store holds more than its bound.
func (s *Store) shedSome(now int64) {
	if !s.shedding.TryLock() {
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
func (s *Store) heaviest() *Policy {
	var top *Policy
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
func (p *Policy) evictOne(now int64, evenLocked bool) bool {
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
	sh.tab.unlink(sh.keys[lg.index].hash, lg)
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
func (s *Store) tick(now int64) {
	list := *s.list.Load()
	n := s.tickN.Add(1)
	p := list[int(n/memShards)%len(list)]
	sh := &p.shards[n%memShards]
	sh.mu.Lock()
	sh.sweepSome(now, 64)
	sh.mu.Unlock()
}

// Refund implements [driver.Store].
func (s *Store) Refund(ctx context.Context, q driver.Query, at int64) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory store: %w", err)
	}
	s.policy(q.Policy).Refund(&q, at)
	return nil
}

// Refund gives back q.N units recorded at time at, unless the key was
// reset (or forgotten) since: its units then went with it.
func (p *Policy) Refund(q *driver.Query, at int64) {
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
	if q.Algorithm == driver.SlidingBuckets {
		for i, r := range q.Rules {
			if r.Calendar != 0 {
				continue
			}
			g := q.BucketWidth(r)
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

// Len returns the number of keys s holds, swept or not yet.
func Len(s *Store) int { return int(s.keys.Load()) }

// inlineRules is how many rules' window starts a key keeps hints for.
const inlineRules = 4

// prepare sizes st for n rule states and returns them, clearing the
// lockout and challenge of an earlier answer: the caller sets every state.
func prepare(st *driver.Result, n int) []driver.RuleState {
	st.LockedFor, st.Challenged = 0, false
	return st.Rules.Prepare(n)
}

// hasChallenge reports whether a rule has a Challenge.
func hasChallenge(rules []driver.Rule) bool {
	for i := range rules {
		if rules[i].Challenge > 0 {
			return true
		}
	}
	return false
}

// hasCalendar reports whether a rule is a calendar rule.
func hasCalendar(rules []driver.Rule) bool {
	for i := range rules {
		if rules[i].Calendar != 0 {
			return true
		}
	}
	return false
}
