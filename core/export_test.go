package core

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// Exported for the black-box tests of package core_test.
var BoundKey = boundKey

// MaxKeyLen is maxKeyLen, for the black-box tests.
const MaxKeyLen = maxKeyLen

// Len is len, for the black-box tests.
func (s *MemoryStore) Len() int { return s.len() }

// RenewLeases makes one round of lease renewals of l now, as its renewal
// goroutine does every LeaseTTL/3.
func RenewLeases(l *Limiter, ctx context.Context) { l.renewLeases(ctx) }

// RedisClientOf returns the go-redis client of s.
func RedisClientOf(s *RedisStore) redis.UniversalClient { return s.client }

// SetWall makes s find calendar periods around wall's time, rather than
// time.Now's, when the server's clock decides: a client whose clock is
// off.
func SetWall(s *RedisStore, wall func() time.Time) { s.wall = wall }

// Instances returns how many instances l's store counted for its policy
// (1 on a store that does not count them).
func Instances(l *Limiter) int {
	if l.fleet == nil {
		return 1
	}
	return l.fleet()
}
