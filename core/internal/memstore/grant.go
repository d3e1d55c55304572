package memstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ratekit/ratekit/core/driver"
)

// maxGrants bounds the live grants a policy keeps in memory.
const maxGrants = 100_000

// grantSet is the grants of a policy's keys. n counts them, so that a
// decision of a policy without grants costs one atomic load, and one
// with grants a read lock.
type grantSet struct {
	n  atomic.Int32
	mu sync.RWMutex
	m  map[string]driver.Grant
}

// lookup returns key's grant live at now (µs), forgetting it once ended.
func (g *grantSet) lookup(key string, now int64) (driver.Grant, bool) {
	g.mu.RLock()
	gr, ok := g.m[key]
	g.mu.RUnlock()
	if !ok || gr.Until.UnixMicro() > now {
		return gr, ok
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if cur, ok := g.m[key]; ok && cur.Until.UnixMicro() <= now {
		delete(g.m, key)
		g.n.Store(int32(len(g.m)))
	}
	return driver.Grant{}, false
}

// set gives key gr, or revokes its grant when gr.Until is zero; it
// forgets the grants ended by now (µs) when the set is full.
func (g *grantSet) set(key string, gr driver.Grant, now int64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if gr.Until.IsZero() {
		delete(g.m, key)
		g.n.Store(int32(len(g.m)))
		return nil
	}
	if g.m == nil {
		g.m = make(map[string]driver.Grant)
	}
	if _, ok := g.m[key]; !ok && len(g.m) >= maxGrants {
		for k, o := range g.m {
			if o.Until.UnixMicro() <= now {
				delete(g.m, k)
			}
		}
		if len(g.m) >= maxGrants {
			return fmt.Errorf("memory store: %d grants live: no room for another", maxGrants)
		}
	}
	g.m[key] = gr
	g.n.Store(int32(len(g.m)))
	return nil
}

// SetGrant implements [driver.Grants].
func (s *Store) SetGrant(ctx context.Context, policy, key string, g driver.Grant) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory store: %w", err)
	}
	if err := checkGrant(g); err != nil {
		return err
	}
	return s.policy(policy).grants.set(key, g, s.now())
}

// checkGrant refuses a grant no limiter sends.
func checkGrant(g driver.Grant) error {
	if g.Until.IsZero() {
		return nil
	}
	if g.Extra < 0 || g.Extra > driver.MaxGrantExtra || (g.Exempt && g.Extra != 0) || (!g.Exempt && g.Extra == 0) ||
		len(g.By) > driver.MaxGrantText || len(g.Note) > driver.MaxGrantText {
		return fmt.Errorf("memory store: grant %+v: %w", g, driver.ErrInvalidQuery)
	}
	return nil
}

// GrantOf implements [driver.Grants].
func (s *Store) GrantOf(ctx context.Context, policy, key string) (driver.Grant, bool, error) {
	if err := ctx.Err(); err != nil {
		return driver.Grant{}, false, fmt.Errorf("memory store: %w", err)
	}
	p := s.policy(policy)
	if p.grants.n.Load() == 0 {
		return driver.Grant{}, false, nil
	}
	g, ok := p.grants.lookup(key, s.now())
	return g, ok, nil
}

// granted decides q as Decide does when q.Key holds a grant, and reports
// whether it did: an exempt key is admitted with nothing counted, and a
// key with extra units is decided with every limit that much higher.
func (p *Policy) granted(q *driver.Query, take bool, st *driver.Result) bool {
	now := q.Now
	if now == 0 {
		now = p.store.now()
	}
	g, ok := p.grants.lookup(q.Key, now)
	if !ok {
		return false
	}
	if g.Exempt {
		rs := prepare(st, len(q.Rules))
		for i, r := range q.Rules {
			rs[i] = driver.RuleState{Limit: r.Limit, Window: r.Window, Calendar: r.Calendar}
		}
		st.Allowed, st.At, st.Exempt = true, now, true
		return true
	}
	gq := *q
	gq.Rules = make([]driver.Rule, len(q.Rules))
	for i, r := range q.Rules {
		r.Limit += g.Extra
		gq.Rules[i] = r
	}
	gq.Keep += g.Extra
	p.decide(&gq, take, st)
	st.Extra = g.Extra
	return true
}
