package core

import (
	"cmp"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekit/ratekit/core/driver"
)

// denyCache remembers keys denied by the store until their RetryAfter. A
// sliding-log key denied for n units with RetryAfter r cannot fit n or
// more units before r passes: entries only leave the window at known
// times, and other requests only add entries. So a hit is a denial the
// store would give too, provided the clocks agree: entries end 0.1% early
// to absorb drift between the store's clock and this one. (A refund
// elsewhere can free units early; the cache then denies a little longer
// than needed, never admits too much.)
//
// A refund or reset frees units, so it removes the key's entry. So that a
// denial decided by a store call in flight meanwhile is not cached after
// the removal (which would deny a key with room for the whole RetryAfter,
// such as a login IP whose reservations were all refunded), a denial is
// cached only if no removal hit its key's stripe since the store call
// began (see generation and put).
//
// The store ([driver.Invalidator]) carries refunds and resets on any instance
// to every instance's cache. Those sent while this instance was not
// listening are lost, so denials cached before the last resync (an older
// epoch) no longer answer while the store does; they still answer while
// the store fails. Until the first resync the cache answers nothing.
//
// Entries are spread over stripes, each a map under a read-write lock: a
// flood of one denied key is answered under read locks that never wait
// on each other, and entries are never copied or allocated on the way
// out. A full stripe makes room by dropping, among a few of its entries,
// the expired ones or else the one that answered the fewest refusals
// (see makeRoom).
//
// An entry counts the refusals it stands for, the store's denial that
// made it and every denial it answered (see refusals): a flood of one
// key costs an atomic add on its entry, and the counts go to the
// limiter's refusals at each flush (fold) or when the entry goes.
type denyCache struct {
	entries []denyStripe
	seed    maphash.Seed
	gens    [denyStripes]atomic.Uint64 // removals, per stripe of keys
	live    atomic.Bool                // the store has listened once: cached denials may answer
	epoch   atomic.Uint64              // resyncs so far: denials cached before the last may be stale
	refused *refusals                  // where the entries' refusals go; nil: nowhere
}

const denyStripes = 64

// denySample is how many entries a full stripe looks at to make room.
const denySample = 8

type denyStripe struct {
	mu  sync.RWMutex
	m   map[string]*denyEntry // entries are never changed once in m, but for their counts
	max int
	// last is the entry that answered last, found again without the
	// lock while it stays in m (until gone): a flood of one key reads
	// a pointer instead of writing the lock's reader count.
	last atomic.Pointer[denyEntry]
}

type denyEntry struct {
	key    string
	until  time.Time // the entry answers until then
	at     time.Time // when the store denied
	n      int64
	epoch  uint64
	d      Decision
	hits   atomic.Int64 // refusals not yet handed to the limiter's refusals
	folded atomic.Int64 // refusals handed over by folds
	gone   atomic.Bool  // out of its stripe: no longer found as last; a hit hands its count over itself
}

// newDenyCache returns a cache of at most size entries; size > 0.
func newDenyCache(size int) *denyCache {
	n := min(size, denyStripes)
	c := &denyCache{entries: make([]denyStripe, n), seed: maphash.MakeSeed()}
	for i := range c.entries {
		c.entries[i].max = size / n
		if i < size%n {
			c.entries[i].max++
		}
		c.entries[i].m = make(map[string]*denyEntry)
	}
	return c
}

func (c *denyCache) stripe(key string) *atomic.Uint64 {
	return &c.gens[maphash.String(c.seed, key)%denyStripes]
}

// of returns the stripe of entries that holds key.
func (c *denyCache) of(key string) *denyStripe {
	return &c.entries[maphash.String(c.seed, key)%uint64(len(c.entries))]
}

// drop removes key's entry if it is still e (any entry when e is nil),
// handing its refusals to r.
func (st *denyStripe) drop(key string, e *denyEntry, r *refusals) {
	st.mu.Lock()
	if cur := st.m[key]; cur != nil && (e == nil || cur == e) {
		delete(st.m, key)
		cur.spill(key, r)
	}
	st.mu.Unlock()
}

// spill marks e out of its stripe, so that it answers no more, and hands
// the refusals it counted to r (nil: nowhere). A hit by a caller that
// found e just before counts after the spill, and hands its count over
// itself (see hit).
func (e *denyEntry) spill(key string, r *refusals) {
	e.gone.Store(true)
	if r == nil {
		return
	}
	if h := e.hits.Swap(0); h > 0 {
		r.add(key, h)
	}
}

// moveTo hands the refusals e counted over to next, which replaces e for
// the same key: the key's count stays in the cache, where a flood of
// other keys cannot push it out of the limiter's sketch.
func (e *denyEntry) moveTo(next *denyEntry) {
	e.gone.Store(true)
	next.hits.Add(e.hits.Swap(0))
	next.folded.Add(e.folded.Load())
}

// hit counts a refusal e answered. When e has gone out of its stripe
// meanwhile, the count may have come after e's spill, so it is handed
// over here: either the spill's swap or this one takes it, never both.
func (e *denyEntry) hit(key string, r *refusals) {
	e.hits.Add(1)
	if e.gone.Load() {
		if h := e.hits.Swap(0); h > 0 {
			r.add(key, h)
		}
		return
	}
	r.arm()
}

// fold hands the refusals every entry counted so far to r, the entries
// that counted the fewest first: so that a flood of keys refused once
// cannot push the keys refused most out of r's sketch.
func (c *denyCache) fold(r *refusals) {
	var counted []driver.RefusedKey
	for i := range c.entries {
		st := &c.entries[i]
		st.mu.RLock()
		for k, e := range st.m {
			if h := e.hits.Swap(0); h > 0 {
				e.folded.Add(h)
				counted = append(counted, driver.RefusedKey{Key: k, Refusals: h})
			}
		}
		st.mu.RUnlock()
	}
	slices.SortFunc(counted, func(a, b driver.RefusedKey) int { return cmp.Compare(a.Refusals, b.Refusals) })
	for _, k := range counted {
		r.put(k.Key, k.Refusals)
	}
}

// makeRoom drops expired entries among a few, or else the one of them
// that counted the fewest refusals (the one that ends soonest on a tie),
// handing their refusals to r; st.mu is held. A flood of keys denied once
// each thus makes room among its own, and the keys refused most stay
// cached, their counts with them.
func (st *denyStripe) makeRoom(now time.Time, r *refusals) {
	var (
		victim  string
		end     time.Time
		hits    int64
		seen    int
		dropped bool
	)
	for k, e := range st.m {
		if !now.Before(e.until) {
			delete(st.m, k)
			e.spill(k, r)
			dropped = true
		} else if h := e.folded.Load() + e.hits.Load(); seen == 0 || h < hits || h == hits && e.until.Before(end) {
			victim, end, hits = k, e.until, h
		}
		if seen++; seen == denySample {
			break
		}
	}
	if !dropped && seen > 0 {
		e := st.m[victim]
		delete(st.m, victim)
		e.spill(victim, r)
	}
}

// since is the state of the cache a store call began in: the removals of
// its key's stripe, and the epoch (see resync).
type since struct{ gen, epoch uint64 }

// generation returns the state of the cache for key; read it before the
// store call whose denial may be put.
func (c *denyCache) generation(key string) since {
	return since{gen: c.stripe(key).Load(), epoch: c.epoch.Load()}
}

// get writes the cached denial of key for n units at now to d, reporting
// whether there was one (d is written only then). Only a denial
// of the same cost answers: a larger cost waits longer than the cached
// RetryAfter says, a smaller one may fit sooner. stale lets denials of an
// older epoch answer, for when the store fails.
func (c *denyCache) get(key string, n int64, now time.Time, stale bool, d *Decision) bool {
	if !c.live.Load() {
		return false
	}
	st := c.of(key)
	e := st.last.Load()
	if e == nil || e.gone.Load() || e.key != key {
		st.mu.RLock()
		e = st.m[key]
		st.mu.RUnlock()
		if e == nil {
			return false
		}
		st.last.Store(e)
	}
	if !stale && e.epoch != c.epoch.Load() {
		return false
	}
	if !now.Before(e.until) {
		st.drop(key, e, c.refused)
		return false
	}
	if n != e.n {
		return false
	}
	if c.refused != nil {
		e.hit(key, c.refused)
	}
	// The store's denial as it stands now: every duration shortened by
	// the time since, the counts as they were (a denial recorded nothing
	// since, or the entry would have been removed).
	*d = e.d
	elapsed := now.Sub(e.at)
	d.RetryAfter = max(0, d.RetryAfter-elapsed)
	d.ResetAfter = max(0, d.ResetAfter-elapsed)
	d.Source = SourceCache
	rs := d.res.Rules.All()
	if len(rs) <= inlineRules {
		for i := range rs {
			shorten(&rs[i], elapsed)
		}
		return true
	}
	// Beyond the inline states the entry's are on the heap, shared with
	// the cache: the decision gets its own.
	var own driver.RuleStates
	for _, s := range rs {
		shorten(&s, elapsed)
		own.Append(s)
	}
	d.res.Rules = own
	return true
}

// put remembers a store denial of key for n units decided at now by a
// store call that began at s, and reports whether it did: it does
// nothing if a removal hit the key's stripe since. The denial belongs to
// the epoch the call began in: a resync since (a reconnection, across
// which a removal may have been missed) leaves it stale from the start.
// The entry counts the denial as its first refusal.
func (c *denyCache) put(key string, n int64, now time.Time, d Decision, s since) bool {
	if d.RetryAfter <= 0 {
		return false
	}
	g := c.stripe(key)
	if g.Load() != s.gen {
		return false
	}
	// The store's clock (Redis TIME, wall time) and this process's
	// monotonic clock may drift apart by up to NTP's 500 ppm; end the entry
	// 1000 ppm early so that it never outlasts the store's own denial.
	ttl := d.RetryAfter - d.RetryAfter/1000
	key = strings.Clone(key) // kept: see memPolicy.insert
	e := &denyEntry{key: key, until: now.Add(ttl), at: now, n: n, epoch: s.epoch, d: d}
	e.hits.Store(1)
	st := c.of(key)
	st.mu.Lock()
	old, ok := st.m[key]
	if !ok && len(st.m) >= st.max {
		st.makeRoom(now, c.refused)
	}
	st.m[key] = e
	if ok {
		old.moveTo(e)
	}
	st.mu.Unlock()
	if c.refused != nil {
		c.refused.arm()
	}
	if g.Load() != s.gen {
		st.drop(key, e, c.refused) // a removal ran between the check and the put
	}
	return true
}

// resync starts a new epoch: invalidations may have been missed, so the
// denials cached before no longer answer while the store does (but still
// answer while it fails). The first resync makes the cache live.
func (c *denyCache) resync() {
	c.epoch.Add(1)
	c.live.Store(true)
}

// remove forgets key's denial. Call it after the store has freed the
// units (refund, reset), so that no denial decided before can be put
// after it.
func (c *denyCache) remove(key string) {
	c.stripe(key).Add(1)
	c.of(key).drop(key, nil, c.refused)
}

// shorten makes the durations of s elapsed shorter, down to 0.
func shorten(s *RuleState, elapsed time.Duration) {
	s.RetryAfter = max(0, s.RetryAfter-elapsed)
	s.ResetAfter = max(0, s.ResetAfter-elapsed)
	s.NextAfter = max(0, s.NextAfter-elapsed)
}
