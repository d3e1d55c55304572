package memstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ratekit/ratekit/core/driver"
)

// AddRefused implements [driver.Refusals].
func (s *Store) AddRefused(ctx context.Context, policy string, refused []driver.RefusedKey) error {
	return s.refused.AddRefused(ctx, policy, refused)
}

// TopRefused implements [driver.Refusals].
func (s *Store) TopRefused(ctx context.Context, policy string, n int) ([]driver.RefusedKey, error) {
	return s.refused.TopRefused(ctx, policy, n)
}

// RefusalLog keeps refusals in this process, as [driver.Refusals] says: per
// policy, the counts of the current minute and the five before it, each
// minute's at most the 1,000 highest. It is Store's, and a
// limiter's on a store without Refusals.
type RefusalLog struct {
	now func() int64 // µs since the Unix epoch

	mu sync.Mutex
	by map[string]*[driver.RefusedMinutes]refusalMinute
}

type refusalMinute struct {
	minute int64 // since the Unix epoch
	counts map[string]int64
}

// NewRefusalLog returns an empty log on the clock now (µs since the Unix
// epoch).
func NewRefusalLog(now func() int64) *RefusalLog {
	return &RefusalLog{now: now, by: make(map[string]*[driver.RefusedMinutes]refusalMinute)}
}

// minute returns the current minute since the Unix epoch.
func (g *RefusalLog) minute() int64 { return g.now() / int64(time.Minute/time.Microsecond) }

// AddRefused implements [driver.Refusals].
func (g *RefusalLog) AddRefused(ctx context.Context, policy string, refused []driver.RefusedKey) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory store: add refused: %w", err)
	}
	m := g.minute()
	g.mu.Lock()
	defer g.mu.Unlock()
	ms := g.by[policy]
	if ms == nil {
		ms = new([driver.RefusedMinutes]refusalMinute)
		g.by[policy] = ms
	}
	cur := &ms[m%driver.RefusedMinutes]
	if cur.minute != m || cur.counts == nil {
		cur.minute = m
		if cur.counts == nil {
			cur.counts = make(map[string]int64)
		}
		clear(cur.counts)
	}
	for _, k := range refused {
		if k.Refusals > 0 {
			cur.counts[k.Key] += k.Refusals
		}
	}
	if len(cur.counts) > driver.RefusedKeep {
		for _, k := range sortRefused(cur.counts)[driver.RefusedKeep:] {
			delete(cur.counts, k.Key)
		}
	}
	return nil
}

// TopRefused implements [driver.Refusals].
func (g *RefusalLog) TopRefused(ctx context.Context, policy string, n int) ([]driver.RefusedKey, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory store: top refused: %w", err)
	}
	if n < 1 {
		return nil, nil
	}
	m := g.minute()
	sum := make(map[string]int64)
	g.mu.Lock()
	if ms := g.by[policy]; ms != nil {
		for i := range ms {
			if mm := &ms[i]; mm.minute > m-driver.RefusedMinutes && mm.minute <= m {
				for k, c := range mm.counts {
					sum[k] += c
				}
			}
		}
	}
	g.mu.Unlock()
	top := sortRefused(sum)
	return top[:min(n, len(top))], nil
}

// sortRefused returns counts most refused first, ties in key order.
func sortRefused(counts map[string]int64) []driver.RefusedKey {
	out := make([]driver.RefusedKey, 0, len(counts))
	for k, c := range counts {
		out = append(out, driver.RefusedKey{Key: k, Refusals: c})
	}
	slices.SortFunc(out, func(a, b driver.RefusedKey) int {
		return cmp.Or(cmp.Compare(b.Refusals, a.Refusals), strings.Compare(a.Key, b.Key))
	})
	return out
}

var _ driver.Refusals = (*RefusalLog)(nil)
