package core

import (
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
type denyCache struct {
	c *lru.Cache[string, denyEntry]
}

type denyEntry struct {
	until time.Time
	reset time.Time
	n     int64
	d     Decision
}

func newDenyCache(size int) *denyCache {
	c, err := lru.New[string, denyEntry](size)
	if err != nil {
		panic(err) // size > 0 is checked by NewLimiter
	}
	return &denyCache{c: c}
}

// get returns the cached denial of key for n units at now.
func (c *denyCache) get(key string, n int64, now time.Time) (Decision, bool) {
	e, ok := c.c.Get(key)
	if !ok {
		return Decision{}, false
	}
	if !now.Before(e.until) {
		c.c.Remove(key)
		return Decision{}, false
	}
	if n < e.n {
		return Decision{}, false
	}
	d := Decision{
		Limit:      e.d.Limit,
		Window:     e.d.Window,
		Rule:       e.d.Rule,
		RetryAfter: e.until.Sub(now),
		ResetAfter: max(0, e.reset.Sub(now)),
		Source:     SourceCache,
	}
	return d, true
}

// put remembers a store denial of key for n units decided at now.
func (c *denyCache) put(key string, n int64, now time.Time, d Decision) {
	if d.RetryAfter <= 0 {
		return
	}
	// The store's clock (Redis TIME, wall time) and this process's
	// monotonic clock may drift apart by up to NTP's 500 ppm; end the entry
	// 1000 ppm early so that it never outlasts the store's own denial.
	ttl := d.RetryAfter - d.RetryAfter/1000
	c.c.Add(key, denyEntry{until: now.Add(ttl), reset: now.Add(d.ResetAfter), n: n, d: d})
}

func (c *denyCache) remove(key string) { c.c.Remove(key) }
