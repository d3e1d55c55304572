package core

import (
	"hash/maphash"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

// denyCache remembers keys denied by the store until their RetryAfter. A
// sliding-log key denied for n units with RetryAfter r cannot fit n or
// more units before r passes: entries only leave the window at known
// times, and other requests only add entries. So a hit is a denial the
// store would give too, provided the clocks agree: entries end 0.1% early
// to absorb drift between the store's clock and this one. (A refund elsewhere can free units early; the
// cache then denies a little longer than needed, never admits too much.)
//
// A refund or reset frees units, so it removes the key's entry. So that a
// denial decided by a store call in flight meanwhile is not cached after
// the removal (which would deny a key with room for the whole RetryAfter,
// such as a login IP whose reservations were all refunded), a denial is
// cached only if no removal hit its key's stripe since the store call
// began (see generation and put).
//
// On a RedisStore, refunds and resets on any instance reach every
// instance's cache (see watcher). Those sent while this instance was not
// subscribed are lost, so denials cached before the last resubscription
// (an older epoch) no longer answer while the store does; they still
// answer while the store fails.
type denyCache struct {
	c     *lru.Cache[string, denyEntry]
	seed  maphash.Seed
	gens  [denyStripes]atomic.Uint64 // removals, per stripe of keys
	live  *atomic.Bool               // nil: no other instance to hear from
	epoch *atomic.Uint64             // subscriptions so far; nil as live
}

const denyStripes = 64

type denyEntry struct {
	until time.Time // the entry answers until then
	at    time.Time // when the store denied
	n     int64
	epoch uint64
	d     Decision
}

func newDenyCache(size int) *denyCache {
	c, err := lru.New[string, denyEntry](size)
	if err != nil {
		panic(err) // size > 0 is checked by NewLimiter
	}
	return &denyCache{c: c, seed: maphash.MakeSeed()}
}

func (c *denyCache) stripe(key string) *atomic.Uint64 {
	return &c.gens[maphash.String(c.seed, key)%denyStripes]
}

// generation returns the removal count of key's stripe; read it before
// the store call whose denial may be put.
func (c *denyCache) generation(key string) uint64 { return c.stripe(key).Load() }

// get returns the cached denial of key for n units at now. Only a denial
// of the same cost answers: a larger cost waits longer than the cached
// RetryAfter says, a smaller one may fit sooner. stale lets denials of an
// older epoch answer, for when the store fails.
func (c *denyCache) get(key string, n int64, now time.Time, stale bool) (Decision, bool) {
	if c.live != nil && !c.live.Load() {
		return Decision{}, false
	}
	e, ok := c.c.Get(key)
	if !ok {
		return Decision{}, false
	}
	if !stale && c.epoch != nil && e.epoch != c.epoch.Load() {
		return Decision{}, false
	}
	if !now.Before(e.until) {
		c.c.Remove(key)
		return Decision{}, false
	}
	if n != e.n {
		return Decision{}, false
	}
	// The store's denial as it stands now: every duration shortened by
	// the time since, the counts as they were (a denial recorded nothing
	// since, or the entry would have been removed).
	d := e.d
	elapsed := now.Sub(e.at)
	d.RetryAfter = max(0, d.RetryAfter-elapsed)
	d.ResetAfter = max(0, d.ResetAfter-elapsed)
	d.Source = SourceCache
	rs := d.Rules()
	if len(rs) > inlineRules {
		rs = append([]RuleState(nil), rs...)
		d.states.more = rs
	}
	for i := range rs {
		rs[i].RetryAfter = max(0, rs[i].RetryAfter-elapsed)
		rs[i].ResetAfter = max(0, rs[i].ResetAfter-elapsed)
	}
	return d, true
}

// put remembers a store denial of key for n units decided at now by a
// store call that began at generation gen; it does nothing if a removal
// hit the key's stripe since.
func (c *denyCache) put(key string, n int64, now time.Time, d Decision, gen uint64) {
	if d.RetryAfter <= 0 {
		return
	}
	g := c.stripe(key)
	if g.Load() != gen {
		return
	}
	// The store's clock (Redis TIME, wall time) and this process's
	// monotonic clock may drift apart by up to NTP's 500 ppm; end the entry
	// 1000 ppm early so that it never outlasts the store's own denial.
	ttl := d.RetryAfter - d.RetryAfter/1000
	var epoch uint64
	if c.epoch != nil {
		epoch = c.epoch.Load()
	}
	c.c.Add(key, denyEntry{until: now.Add(ttl), at: now, n: n, epoch: epoch, d: d})
	if g.Load() != gen {
		c.c.Remove(key) // a removal ran between the check and the Add
	}
}

// remove forgets key's denial. Call it after the store has freed the
// units (refund, reset), so that no denial decided before can be put
// after it.
func (c *denyCache) remove(key string) {
	c.stripe(key).Add(1)
	c.c.Remove(key)
}
