package core

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekit/ratekit/core/driver"
)

// breaker stops store calls after consecutive failures. Closed: every call
// goes through. Open: none until the cool-down ends. Half-open: one probe
// at a time; its success closes the breaker, its failure reopens it.
type breaker struct {
	threshold int32
	cooldown  time.Duration
	fails     atomic.Int32
	openUntil atomic.Int64 // unix nanoseconds; 0 when closed
	probing   atomic.Bool
}

// allow reports whether a store call may be made now, and whether that
// call is the probe of a half-open breaker.
func (b *breaker) allow(now time.Time) (ok, probe bool) {
	if b.threshold == 0 {
		return true, false
	}
	until := b.openUntil.Load()
	if until == 0 {
		return true, false
	}
	if now.UnixNano() < until {
		return false, false
	}
	if b.probing.CompareAndSwap(false, true) {
		return true, true
	}
	return false, false
}

// look reports whether a peek may call the store now: when the breaker
// is closed or its cool-down has ended. A peek is not a decision and says
// nothing of the store's health, so it never takes the probe's place: a
// peek holding the probe would keep the breaker from ever closing.
func (b *breaker) look(now time.Time) bool {
	if b.threshold == 0 {
		return true
	}
	until := b.openUntil.Load()
	return until == 0 || now.UnixNano() >= until
}

// abandon releases the probe of a call whose caller gave up before the
// store answered. That says nothing about the store, so the breaker stays
// open, but the next call after the cool-down must be free to probe:
// otherwise the breaker would never close again.
func (b *breaker) abandon() { b.probing.Store(false) }

// success records a successful call and reports whether it closed an open
// breaker.
func (b *breaker) success() bool {
	if b.threshold == 0 {
		return false
	}
	if b.fails.Load() != 0 {
		b.fails.Store(0)
	}
	if b.openUntil.Load() == 0 {
		return false
	}
	b.openUntil.Store(0)
	b.probing.Store(false)
	return true
}

// failure records a failed call and reports whether it opened the breaker.
func (b *breaker) failure(now time.Time) bool {
	if b.threshold == 0 {
		return false
	}
	if b.probing.Load() {
		b.openUntil.Store(now.Add(b.cooldown).UnixNano())
		b.probing.Store(false)
		return false
	}
	if b.fails.Add(1) == b.threshold {
		b.openUntil.Store(now.Add(b.cooldown).UnixNano())
		return true
	}
	return false
}

// retryAfter is when a store call will next be tried, at least 1 s, for
// FailClosed answers.
func (b *breaker) retryAfter(now time.Time) time.Duration {
	if until := b.openUntil.Load(); until != 0 {
		if d := time.Duration(until - now.UnixNano()); d > time.Second {
			return d
		}
	}
	return time.Second
}

// breakers are the circuit breakers of a limiter: one, or on a
// [driver.Partitioned] store one per partition, made when first needed.
type breakers struct {
	one       breaker
	part      driver.Partitioned
	threshold int32
	cooldown  time.Duration
	mu        sync.Mutex
	by        map[string]*breaker // per partition, on a Partitioned store
}

// init sets the breakers up for store with the options o.
func (b *breakers) init(store Store, o options) {
	b.threshold, b.cooldown = int32(o.breakerFails), o.breakerCool
	b.one = breaker{threshold: b.threshold, cooldown: b.cooldown}
	b.part, _ = store.(driver.Partitioned)
}

// of returns the breaker of q's partition.
func (b *breakers) of(q *driver.Query) *breaker {
	if b.part == nil {
		return &b.one
	}
	name := b.part.Partition(q.Policy, q.Key)
	b.mu.Lock()
	defer b.mu.Unlock()
	br := b.by[name]
	if br == nil {
		if b.by == nil {
			b.by = make(map[string]*breaker)
		}
		br = &breaker{threshold: b.threshold, cooldown: b.cooldown}
		b.by[name] = br
	}
	return br
}
