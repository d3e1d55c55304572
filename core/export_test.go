package core

import (
	"context"
	"time"

	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/core/internal/memstore"
)

// MaxKeyLen is driver.MaxKeyLen, for the black-box tests.
const MaxKeyLen = driver.MaxKeyLen

// MemoryLen is how many keys s holds, swept or not yet, for the
// black-box tests.
func MemoryLen(s *MemoryStore) int { return memstore.Len(s) }

// RenewLeases makes one round of lease renewals of l now, as its renewal
// goroutine does every LeaseTTL/3.
func RenewLeases(l *Limiter, ctx context.Context) {
	if f, ok := l.d.(*inFlight); ok {
		f.renew(ctx)
	}
}

// Counted reports whether l's store counts the instances of its policy
// for l.
func Counted(l *Limiter) bool { return l.fleet != nil }

// WithRefusedEvery makes the limiter add its refusals to the store every
// d while it refuses requests, instead of every 5 seconds.
func WithRefusedEvery(d time.Duration) Option {
	return func(o *options) { o.refusedEvery = d }
}

// WithoutRefusals makes a limiter that counts no refusals, for the
// benchmarks of what counting them costs.
func WithoutRefusals() Option {
	return func(o *options) { o.noRefusals = true }
}

// FlushRefused adds the refusals l counted so far to its store, as its
// timer does every 5 seconds.
func FlushRefused(ctx context.Context, l *Limiter) error {
	if l.refused == nil {
		return nil
	}
	return l.refused.flush(ctx)
}

// RefusedCounted returns how many keys l's sketches count now, and how
// many they can count at most.
func RefusedCounted(l *Limiter) (n, most int) {
	for i := range l.refused.sk {
		sh := &l.refused.sk[i]
		sh.mu.Lock()
		n += sh.t.len()
		most += cap(sh.t.c)
		sh.mu.Unlock()
	}
	return n, most
}
