package redissuite

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// sources counts the decisions a limiter reported by who made them,
// and the store's errors.
type sources struct {
	store, cache, fallback atomic.Int64
	storeErrors            atomic.Int64
	firstError             atomic.Pointer[error]
}

func (s *sources) Observe(_ context.Context, e core.Event) {
	switch {
	case e.Kind == core.EventStoreError:
		s.storeErrors.Add(1)
		s.firstError.CompareAndSwap(nil, &e.Err)
	case e.Kind != core.EventDecision:
	case e.Decision.Source == core.SourceStore:
		s.store.Add(1)
	case e.Decision.Source == core.SourceCache:
		s.cache.Add(1)
	default:
		s.fallback.Add(1)
	}
}

// LiveMigration has 16 goroutines decide distinct keys (limit 5 a minute,
// each key asked 10 times, a decision every half millisecond) through
// store, batching on, while the slot of the keys migrates live with 3,000
// other keys; mixed, half of the goroutines decide keys of the master's
// other slots instead, so that the slot's decisions share flights with
// theirs. The decisions share script calls, which meet TRYAGAIN and ASK
// while the slot's keys are split between two masters, and MOVED after.
// No decision goes to the failure policy, every key asked 10 times is
// admitted exactly 5 times, and the store holds what it admitted. The
// limiter has default options but its timeout, testkit.StoreTimeout
// rather than 20 ms: a shared 2-core machine misses 20 ms by scheduling
// alone (measured with the same load and no migration: 1 to 13,507
// decisions by the failure policy in 3 runs of 6).
func LiveMigration(t *testing.T, c *redistest.Cluster, store ClusterStore, tag string, mixed bool) {
	const (
		goroutines = 16
		perKey     = 10
		limit      = 5
		fillers    = 3000
		perG       = 2000
	)
	ctx := context.Background()
	slot := redistest.Slot(tag)
	from := c.SlotOwner(slot)
	to := (from + 1) % 3
	fillSlot(t, c.Client(t), tag, fillers)
	keys := tagKeys(tag, goroutines*perG)
	if mixed {
		// The master's slots, as formed, but the migrating one.
		lo, hi := from*redistest.SlotCount/3, (from+1)*redistest.SlotCount/3-1
		others := redistest.KeysWhere(len(keys)/2, tag+"-other", func(s int) bool { return s >= lo && s <= hi && s != slot })
		copy(keys[len(keys)/2:], others)
	}
	policy := core.Policy{Name: tag, Rules: []core.Rule{{Limit: limit, Window: time.Minute}}}
	probe := testkit.Limiter(t, store, policy, core.WithTimeout(5*time.Second))
	if d, err := probe.Peek(ctx, keys[0]); err != nil || d.Source != core.SourceStore {
		t.Fatalf("warming: Peek(%s) = %+v, %v; want the store's answer", keys[0], d, err)
	}
	testkit.WaitUntil(t, "the store knows the slot map", func() bool { return store.Partition(tag, keys[0]) == c.Node(from).Addr() })

	var src sources
	l := testkit.Limiter(t, store, policy, core.WithTimeout(testkit.StoreTimeout), core.WithObserver(&src))
	asked := make([]atomic.Int64, len(keys))
	admitted := make([]atomic.Int64, len(keys))
	st := migrateUnderLoad(t, c, l, keys, goroutines, perKey, 500*time.Microsecond, slot, from, to, func(i int, d core.Decision) {
		asked[i].Add(1)
		if d.Allowed {
			admitted[i].Add(1)
		}
	})

	wrong, full, held := 0, 0, 0
	for i := range keys {
		n, a := asked[i].Load(), admitted[i].Load()
		if n == perKey {
			full++
		}
		if a > limit || n == perKey && a != limit {
			if wrong++; wrong <= 10 {
				t.Errorf("key %s: asked %d times, admitted %d; want at most %d, exactly %[4]d when asked %d times", keys[i], n, a, limit, perKey)
			}
		}
		if n > 0 && (i%50 == 0 || a != limit) {
			d, err := probe.Peek(ctx, keys[i])
			if err != nil || d.Source != core.SourceStore || d.Rules()[0].Used != a {
				if held++; held <= 10 {
					t.Errorf("Peek(%s) after the migration: %v from %v, %v; want Used %d from the store", keys[i], d.Rules(), d.Source, err, a)
				}
			}
		}
	}
	t.Logf("slot %d moved (node %d -> %d): %d keys in %d batches in %v; %d keys asked %d times; decisions: %d by the store, %d by the deny cache, %d by the failure policy; %d store errors; %d keys admitted wrongly, %d held wrongly",
		slot, from, to, st.Keys, st.Batches, st.Duration.Round(time.Millisecond), full, perKey,
		src.store.Load(), src.cache.Load(), src.fallback.Load(), src.storeErrors.Load(), wrong, held)
	if n := src.fallback.Load(); n > 0 {
		t.Errorf("%d decisions by the failure policy during the migration (%d store errors, the first: %v), want 0", n, src.storeErrors.Load(), *src.firstError.Load())
	}
}

// ClusterStore is a store on a Cluster that names the master of a key.
type ClusterStore interface {
	core.Store
	Partition(policy, key string) string
}

// MasterKilled kills master node 0 of c, which has replicas, while 12
// goroutines decide keys of every master through store, a decision every
// half millisecond each (a driver's TestClusterMasterKilled). Each surviving
// master's key (limit 5 an hour) is admitted exactly 5 times.
func MasterKilled(t *testing.T, c *redistest.Cluster, store ClusterStore) {
	const (
		limit  = 5               // of the surviving masters' keys, an hour
		within = 5 * time.Second // from the Cluster agreeing to the killed master's keys decided by the store
	)
	ctx := context.Background()
	dead := redistest.KeysWhere(32, "dead", func(s int) bool { return s < redistest.SlotCount/3 })
	alive := redistest.KeysWhere(400, "alive", func(s int) bool { return s >= redistest.SlotCount/3 })
	deadPolicy := core.Policy{Name: "d", Rules: []core.Rule{{Limit: 100000, Window: time.Hour}}}
	alivePolicy := core.Policy{Name: "a", Rules: []core.Rule{{Limit: limit, Window: time.Hour}}}
	probe := testkit.Limiter(t, store, deadPolicy, core.WithTimeout(5*time.Second))
	for _, k := range dead {
		if d, err := probe.Peek(ctx, k); err != nil || d.Source != core.SourceStore {
			t.Fatalf("warming: Peek(%s) = %+v, %v; want the store's answer", k, d, err)
		}
	}
	testkit.WaitUntil(t, "the store knows the slot map", func() bool { return store.Partition("d", dead[0]) == c.Node(0).Addr() })

	// The limiters keep the client's defaults but a generous timeout:
	// what a dead master costs does not depend on it (its connections
	// are refused at once), and a loaded machine must not send a
	// surviving master's decision to the failure policy.
	var deadSrc, aliveSrc sources
	deadL := testkit.Limiter(t, store, deadPolicy, core.WithTimeout(testkit.StoreTimeout), core.WithObserver(&deadSrc))
	aliveL := testkit.Limiter(t, store, alivePolicy, core.WithTimeout(testkit.StoreTimeout), core.WithObserver(&aliveSrc))
	asked := make([]atomic.Int64, len(alive))
	admitted := make([]atomic.Int64, len(alive))
	var (
		stop         atomic.Bool
		lastFallback atomic.Int64 // when the last fallback decision on a killed master's key began, unix ns
		storeAfter   atomic.Int64 // store decisions on its keys begun after it
		wg           sync.WaitGroup
	)
	for g := range 4 {
		wg.Go(func() {
			for i := g; !stop.Load(); i++ {
				start := time.Now().UnixNano()
				d, err := deadL.Allow(ctx, dead[i%len(dead)])
				if err != nil {
					t.Errorf("Allow(%s): %v", dead[i%len(dead)], err)
					return
				}
				if d.Source.Fallback() {
					if last := lastFallback.Load(); start > last && lastFallback.CompareAndSwap(last, start) {
						storeAfter.Store(0)
					}
				} else if start > lastFallback.Load() {
					storeAfter.Add(1)
				}
				time.Sleep(500 * time.Microsecond)
			}
		})
	}
	for g := range 8 {
		wg.Go(func() {
			for i := g; !stop.Load(); i += 8 {
				k := i % len(alive)
				d, err := aliveL.Allow(ctx, alive[k])
				if err != nil {
					t.Errorf("Allow(%s): %v", alive[k], err)
					return
				}
				asked[k].Add(1)
				if d.Allowed {
					admitted[k].Add(1)
				}
				time.Sleep(500 * time.Microsecond)
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	killed := time.Now()
	r := c.KillMaster(0)
	agreed := c.WaitPromoted(r, redistest.Slot(dead[0]))
	// Traffic goes on until the killed master's keys have been decided
	// by the store for a second, or for a second past the bound.
	for time.Since(agreed) < within+time.Second {
		if last := time.Unix(0, lastFallback.Load()); time.Since(last) > time.Second && storeAfter.Load() > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()

	back := time.Unix(0, lastFallback.Load()).Sub(agreed)
	t.Logf("master 0 killed; the Cluster agreed on node %d after %v; its keys decided by the failure policy until %v after that (%d store decisions since); decisions on them: %d by the store, %d by the failure policy; on the other masters' keys: %d by the store, %d by the deny cache, %d by the failure policy",
		r, agreed.Sub(killed).Round(time.Millisecond), back.Round(time.Millisecond), storeAfter.Load(),
		deadSrc.store.Load(), deadSrc.fallback.Load(), aliveSrc.store.Load(), aliveSrc.cache.Load(), aliveSrc.fallback.Load())
	if deadSrc.fallback.Load() == 0 {
		t.Error("no decision on the killed master's keys went to the failure policy: did the kill take?")
	}
	if back > within || storeAfter.Load() == 0 {
		t.Errorf("the killed master's keys were decided by the failure policy until %v after the Cluster agreed on its replica (%d store decisions since), want by the store within %v",
			back.Round(time.Millisecond), storeAfter.Load(), within)
	}
	if n := aliveSrc.fallback.Load(); n > 0 {
		t.Errorf("%d decisions on the surviving masters' keys by the failure policy, want 0", n)
	}
	for k := range alive {
		if n, a := asked[k].Load(), admitted[k].Load(); a > limit || n >= limit && a != limit {
			t.Errorf("key %s of a surviving master asked %d times, admitted %d; want at most %d, exactly %[4]d when asked as often", alive[k], n, a, limit)
		}
	}
}
