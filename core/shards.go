package core

import (
	"strconv"
	"sync/atomic"

	"github.com/ratekit/ratekit/core/driver"
)

// shardSet splits each key of a policy with Shards > 1 over that many
// store keys: "<key>#<i>", each a hash tag of its own on Redis, so the
// shards of one key land in different Cluster slots. Shard i holds, for
// every rule, the share Limit/Shards, plus one unit for the first
// Limit%Shards shards: the shares sum to the limit exactly. Decisions go
// to the shards in turn.
type shardSet struct {
	n      int
	next   atomic.Uint64
	shares [][]driver.Rule // per shard: the policy's rules with the shard's shares
}

// newShardSet returns the shards of a valid policy; nil when it has none.
func newShardSet(p Policy, rules []driver.Rule) *shardSet {
	if p.Shards <= 1 {
		return nil
	}
	s := &shardSet{n: p.Shards, shares: make([][]driver.Rule, p.Shards)}
	for i := range s.shares {
		rs := make([]driver.Rule, len(rules))
		for j, r := range rules {
			r.Limit = share(r.Limit, p.Shards, i)
			rs[j] = r
		}
		s.shares[i] = rs
	}
	return s
}

// share returns shard i's share of limit over n shards.
func share(limit int64, n, i int) int64 {
	q := limit / int64(n)
	if int64(i) < limit%int64(n) {
		q++
	}
	return q
}

// shardKey names shard i of key. Shard numbers hold no '#', so distinct
// (key, shard) pairs give distinct names.
func shardKey(key string, i int) string { return key + "#" + strconv.Itoa(i) }

// pick returns the store key and index of the shard of key that decides
// the next request: the shards take turns, on a counter shared by the
// limiter's keys. Without shards it returns key and 0.
func (s *shardSet) pick(key string) (string, int) {
	if s == nil {
		return key, 0
	}
	i := int((s.next.Add(1) - 1) % uint64(s.n))
	return shardKey(key, i), i
}

// peek returns the shard pick would return next, without taking the turn.
func (s *shardSet) peek(key string) (string, int) {
	if s == nil {
		return key, 0
	}
	i := int(s.next.Load() % uint64(s.n))
	return shardKey(key, i), i
}

// rules returns the rules of shard i; without shards, all.
func (s *shardSet) rules(i int, all []driver.Rule) []driver.Rule {
	if s == nil {
		return all
	}
	return s.shares[i]
}

// count returns the number of shards.
func (s *shardSet) count() int { return s.n }
