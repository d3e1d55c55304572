package core

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

// tierSet resolves keys to tiers ([WithTiers]): to the index of the
// tier's limiter among a limiter's tier limiters, -1 for the policy's
// own rules.
type tierSet struct {
	resolve func(ctx context.Context, key string) (string, error)
	index   map[string]int // a tier's name to its index
	cache   *lru.Cache[string, tierEntry]
	ttl     time.Duration
	// gen counts invalidations, so that a tier resolved before one is
	// not cached after it (see pick).
	gen atomic.Uint64
}

type tierEntry struct {
	i   int // -1: the default tier
	exp time.Time
}

// pick returns the index of key's tier, or -1 for the default tier. The
// tier is resolved from key and cached under its bounded form.
func (ts *tierSet) pick(ctx context.Context, key, bounded string) int {
	now := time.Now()
	if ts.cache != nil {
		if e, ok := ts.cache.Get(bounded); ok && now.Before(e.exp) {
			return e.i
		}
	}
	gen := ts.gen.Load()
	name, err := ts.resolve(ctx, key)
	if err != nil {
		// The default tier for this request alone: a failed lookup (a
		// caller that hung up, a database blip) is no answer to cache.
		return -1
	}
	i, ok := ts.index[name]
	if !ok {
		i = -1
	}
	if ts.cache != nil {
		ts.cache.Add(strings.Clone(bounded), tierEntry{i: i, exp: now.Add(ts.ttl)}) // kept: see memPolicy.insert
		if ts.gen.Load() != gen {
			// An invalidation came while resolve ran: what it returned
			// may be the old tier, so it must not answer later requests.
			ts.cache.Remove(bounded)
		}
	}
	return i
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
