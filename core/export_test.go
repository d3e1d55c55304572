package core

import (
	"context"
)

// MaxKeyLen is maxKeyLen, for the black-box tests.
const MaxKeyLen = maxKeyLen

// Len is len, for the black-box tests.
func (s *MemoryStore) Len() int { return s.len() }

// RenewLeases makes one round of lease renewals of l now, as its renewal
// goroutine does every LeaseTTL/3.
func RenewLeases(l *Limiter, ctx context.Context) {
	if f, ok := l.d.(*inFlight); ok {
		f.renew(ctx)
	}
}

// Instances returns how many instances l's store counted for its policy
// (1 on a store that does not count them).
func Instances(l *Limiter) int {
	if l.fleet == nil {
		return 1
	}
	return l.fleet()
}

// Counted reports whether l's store counts the instances of its policy
// for l.
func Counted(l *Limiter) bool { return l.fleet != nil }
