package memstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"strings"
	"sync"

	"github.com/ratekit/ratekit/core/driver"
)

// TakeLease implements [driver.Leases]. The leases of a Store never expire:
// their holder and the store are one process, so no holder can die and
// leave them behind; l.TTL is ignored.
func (s *Store) TakeLease(ctx context.Context, l driver.Lease) (ok bool, held int64, err error) {
	if err := ctx.Err(); err != nil {
		return false, 0, fmt.Errorf("memory store: %w", err)
	}
	held, ok = LeasesOf(s, l.Policy).Take(l.Key, l.Owner, l.Seq, l.N, l.Limit)
	return ok, held, nil
}

// HeldLeases implements [driver.Leases].
func (s *Store) HeldLeases(ctx context.Context, l driver.Lease) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("memory store: %w", err)
	}
	return LeasesOf(s, l.Policy).Count(l.Key), nil
}

// ReleaseLease implements [driver.Leases].
func (s *Store) ReleaseLease(ctx context.Context, l driver.Lease) error {
	LeasesOf(s, l.Policy).Release(l.Key, l.Owner, l.Seq)
	return nil
}

// RenewLeases implements [driver.Leases]: a lease is there until it is released.
func (s *Store) RenewLeases(ctx context.Context, ls []driver.Lease, held []bool) error {
	for i, l := range ls {
		held[i] = LeasesOf(s, l.Policy).has(l.Key, leaseID{l.Owner, l.Seq})
	}
	return nil
}

// leaseID identifies a lease: its limiter's owner number and its first
// seq.
type leaseID struct{ owner, seq int64 }

// Leases holds the leases of one policy in a Store. They have no
// TTL: the process that holds them is the store, so no holder can die and
// leave them behind.
type Leases struct {
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

// LeasesOf returns the leases of policy in s, created on first use: a
// limiter's FailLocal fallback keeps its leases there.
func LeasesOf(s *Store, policy string) *Leases {
	if m, ok := s.leases.Load(policy); ok {
		return m.(*Leases)
	}
	m := &Leases{seed: s.seed}
	for i := range m.stripes {
		m.stripes[i].keys = make(map[string]*memLeaseKey)
	}
	v, _ := s.leases.LoadOrStore(policy, m)
	return v.(*Leases)
}

// resetLeases forgets the leases of key under policy.
func (s *Store) resetLeases(policy, key string) {
	if m, ok := s.leases.Load(policy); ok {
		st := m.(*Leases).stripe(key)
		st.mu.Lock()
		delete(st.keys, key)
		st.mu.Unlock()
	}
}

func (m *Leases) stripe(key string) *leaseStripe {
	return &m.stripes[maphash.String(m.seed, key)%memShards]
}

// Take adds the lease (owner, seq) of n units to key if they fit limit,
// and returns the units held after it.
func (m *Leases) Take(key string, owner, seq, n, limit int64) (used int64, ok bool) {
	id := leaseID{owner, seq}
	st := m.stripe(key)
	st.mu.Lock()
	defer st.mu.Unlock()
	k := st.keys[key]
	if k == nil {
		if n > limit {
			return 0, false
		}
		k = &memLeaseKey{units: make(map[leaseID]int64, 1)}
		st.keys[strings.Clone(key)] = k // kept: see Policy.insert
	}
	if k.used+n > limit {
		return k.used, false
	}
	k.units[id] = n
	k.used += n
	return k.used, true
}

// Release removes lease id from key; nothing if it is gone.
func (m *Leases) Release(key string, owner, seq int64) {
	id := leaseID{owner, seq}
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

// Count returns the units held for key.
func (m *Leases) Count(key string) int64 {
	st := m.stripe(key)
	st.mu.Lock()
	defer st.mu.Unlock()
	if k := st.keys[key]; k != nil {
		return k.used
	}
	return 0
}

// has reports whether lease id of key is there.
func (m *Leases) has(key string, id leaseID) bool {
	st := m.stripe(key)
	st.mu.Lock()
	defer st.mu.Unlock()
	if k := st.keys[key]; k != nil {
		_, ok := k.units[id]
		return ok
	}
	return false
}

// Forget drops every lease of key.
func (m *Leases) Forget(key string) {
	st := m.stripe(key)
	st.mu.Lock()
	delete(st.keys, key)
	st.mu.Unlock()
}

// Reset implements [driver.Store].
func (s *Store) Reset(ctx context.Context, q driver.Query) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory store: %w", err)
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
