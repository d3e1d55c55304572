package core

import (
	"context"
	"fmt"
	"hash/maphash"
	"strings"
	"sync"
)

// TakeLease implements [Leases]. The leases of a MemoryStore never expire:
// their holder and the store are one process, so no holder can die and
// leave them behind; l.TTL is ignored.
func (s *MemoryStore) TakeLease(ctx context.Context, l Lease) (ok bool, held int64, err error) {
	if err := ctx.Err(); err != nil {
		return false, 0, fmt.Errorf("ratekit: memory store: %w", err)
	}
	held, ok = s.leasesOf(l.Policy).take(l.Key, leaseID{l.Owner, l.Seq}, l.N, l.Limit)
	return ok, held, nil
}

// HeldLeases implements [Leases].
func (s *MemoryStore) HeldLeases(ctx context.Context, l Lease) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("ratekit: memory store: %w", err)
	}
	return s.leasesOf(l.Policy).count(l.Key), nil
}

// ReleaseLease implements [Leases].
func (s *MemoryStore) ReleaseLease(ctx context.Context, l Lease) error {
	s.leasesOf(l.Policy).release(l.Key, leaseID{l.Owner, l.Seq})
	return nil
}

// RenewLeases implements [Leases]: a lease is there until it is released.
func (s *MemoryStore) RenewLeases(ctx context.Context, ls []Lease, held []bool) error {
	for i, l := range ls {
		held[i] = s.leasesOf(l.Policy).has(l.Key, leaseID{l.Owner, l.Seq})
	}
	return nil
}

// leaseID identifies a lease: its limiter's owner number and its first
// seq.
type leaseID struct{ owner, seq int64 }

// memLeases holds the leases of one policy in a MemoryStore. They have no
// TTL: the process that holds them is the store, so no holder can die and
// leave them behind.
type memLeases struct {
	seed    maphash.Seed
	stripes [memShards]leaseStripe
}

type leaseStripe struct {
	mu   sync.Mutex
	keys map[string]*memLeaseKey
}

// memLeaseKey is the leases of one key: units per lease, and their sum.
type memLeaseKey struct {
	used  int64
	units map[leaseID]int64
}

// leasesOf returns the leases of a policy, created on first use.
func (s *MemoryStore) leasesOf(policy string) *memLeases {
	if m, ok := s.leases.Load(policy); ok {
		return m.(*memLeases)
	}
	m := &memLeases{seed: s.seed}
	for i := range m.stripes {
		m.stripes[i].keys = make(map[string]*memLeaseKey)
	}
	v, _ := s.leases.LoadOrStore(policy, m)
	return v.(*memLeases)
}

// resetLeases forgets the leases of key under policy.
func (s *MemoryStore) resetLeases(policy, key string) {
	if m, ok := s.leases.Load(policy); ok {
		st := m.(*memLeases).stripe(key)
		st.mu.Lock()
		delete(st.keys, key)
		st.mu.Unlock()
	}
}

func (m *memLeases) stripe(key string) *leaseStripe {
	return &m.stripes[maphash.String(m.seed, key)%memShards]
}

// take adds lease id of n units to key if they fit limit, and returns the
// units held after it.
func (m *memLeases) take(key string, id leaseID, n, limit int64) (used int64, ok bool) {
	st := m.stripe(key)
	st.mu.Lock()
	defer st.mu.Unlock()
	k := st.keys[key]
	if k == nil {
		if n > limit {
			return 0, false
		}
		k = &memLeaseKey{units: make(map[leaseID]int64, 1)}
		st.keys[strings.Clone(key)] = k // kept: see memPolicy.insert
	}
	if k.used+n > limit {
		return k.used, false
	}
	k.units[id] = n
	k.used += n
	return k.used, true
}

// release removes lease id from key; nothing if it is gone.
func (m *memLeases) release(key string, id leaseID) {
	st := m.stripe(key)
	st.mu.Lock()
	defer st.mu.Unlock()
	k := st.keys[key]
	if k == nil {
		return
	}
	if n, ok := k.units[id]; ok {
		delete(k.units, id)
		k.used -= n
		if len(k.units) == 0 {
			delete(st.keys, key)
		}
	}
}

// count returns the units held for key.
func (m *memLeases) count(key string) int64 {
	st := m.stripe(key)
	st.mu.Lock()
	defer st.mu.Unlock()
	if k := st.keys[key]; k != nil {
		return k.used
	}
	return 0
}

// has reports whether lease id of key is there.
func (m *memLeases) has(key string, id leaseID) bool {
	st := m.stripe(key)
	st.mu.Lock()
	defer st.mu.Unlock()
	if k := st.keys[key]; k != nil {
		_, ok := k.units[id]
		return ok
	}
	return false
}

// forget drops every lease of key.
func (m *memLeases) forget(key string) {
	st := m.stripe(key)
	st.mu.Lock()
	delete(st.keys, key)
	st.mu.Unlock()
}

// Reset implements [Store].
func (s *MemoryStore) Reset(ctx context.Context, q Query) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ratekit: memory store: %w", err)
	}
	p := s.policy(q.Policy)
	sh, h := p.shard(q.Key)
	sh.mu.Lock()
	if lg := sh.get(h, q.Key); lg != nil {
		sh.forgot = max(sh.forgot, lg.used)
		sh.remove(lg)
	}
	sh.mu.Unlock()
	s.resetLeases(q.Policy, q.Key)
	return nil
}
