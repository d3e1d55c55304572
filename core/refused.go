package core

import (
	"context"
	"errors"
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/core/internal/memstore"
)

// Who is being limited: every limiter counts the requests it refuses, key
// by key, in sketches of fixed size (Space-Saving, see topk), and adds
// the counts to its store every few seconds ([driver.Refusals]), where the
// instances that share the store sum them per minute.
// [Limiter.TopRefused] reads the sums of the last minutes.
//
// The refusals a limiter counts are its denials: by the store, by the
// deny cache, by the local fallback store (FailLocal) and under an
// InFlight policy, those of WaitN's attempts included; not the denials of
// FailClosed, which refuses every key while the store fails.
//
// A denial of a shared store is cached (denyCache), and the flood of a
// key already denied is answered from its cache entry: the entry counts
// every denial it stands for, the store's that made it included, with an
// atomic add and nothing else. A denial that replaces the entry of its key
// takes the count over, and a full cache makes room among the entries
// that counted the fewest, so the keys refused most keep their counts in
// the cache, exact, whatever else is refused. Each flush folds the
// entries' counts into the sketches, the smallest first, so that they
// enter the sketches above a flood of keys refused once; an entry that
// goes hands its count to the sketches then. Other denials (a Local
// store's, the fallback's, InFlight's, and a denial the cache did not
// keep) go to the sketches at once, each sketch under a lock of its own
// chosen by the key.
//
// A flush runs in a goroutine of its own, started by a timer that the
// first refusal since the last flush arms: no goroutine waits while
// nothing is refused, and none outlives its flush, so a limiter needs no
// Close. A flush that fails (the store is down) puts its counts back
// into the sketches, and the next refusal arms the next; one that timed
// out drops them (the store may have added them). Either is reported to
// the observers as an EventStoreError; without an observer, a flush whose
// counts were dropped is logged (one whose counts wait for the next is
// not: the fallback's own line has said the store fails).

// Bounds of the refusals counted.
const (
	// refusedShards is the number of sketches a limiter spreads its keys
	// over, each under a lock of its own, and refusedShardSize the keys
	// each counts: 256 in all.
	refusedShards    = 8
	refusedShardSize = 32
	// refusedEvery is how often a limiter adds its counts to the store
	// while it refuses requests.
	refusedEvery = 5 * time.Second
	// refusedTimeout bounds a flush, and each store call of TopRefused.
	refusedTimeout = 2 * time.Second
)

// refusals counts the refusals of a limiter and of its tiers' limiters.
type refusals struct {
	policy string
	sink   driver.Refusals // the store, or a log in this process
	shards bool            // keys are shard keys: count them without "#<i>"
	every  time.Duration
	seed   maphash.Seed
	sk     [refusedShards]refusalShard
	caches []counter   // folded into the sketches at each flush; set when built
	armed  atomic.Bool // a flush is due
	timer  *time.Timer // runs tick; stopped while nothing is due
	failed func(error) // told when the timer's flush fails; set when built
}

// counter counts refusals of its own (a deny cache counts those it
// answers) and hands them over to r at each of r's flushes.
type counter interface{ fold(r *refusals) }

type refusalShard struct {
	mu sync.Mutex
	t  *topk
	_  [40]byte // a cache line of its own
}

// newRefusals returns the refusal counts of policy p on store, flushed
// every every.
func newRefusals(p Policy, store Store, every time.Duration) *refusals {
	r := &refusals{policy: p.Name, shards: p.Shards > 1, every: every, seed: maphash.MakeSeed()}
	if s, ok := store.(driver.Refusals); ok {
		r.sink = s
	} else {
		r.sink = memstore.NewRefusalLog(func() int64 { return time.Now().UnixMicro() })
	}
	for i := range r.sk {
		r.sk[i].t = newTopk(refusedShardSize)
	}
	r.timer = time.AfterFunc(time.Hour, r.tick)
	r.timer.Stop()
	return r
}

// add counts w refusals of the store key key, and arms the flush.
func (r *refusals) add(key string, w int64) {
	r.put(key, w)
	r.arm()
}

// put counts w refusals of the store key key.
func (r *refusals) put(key string, w int64) {
	if r.shards {
		if i := strings.LastIndexByte(key, '#'); i >= 0 {
			key = key[:i]
		}
	}
	h := maphash.String(r.seed, key)
	sh := &r.sk[h>>61] // the high bits: the sketch's table uses the low ones
	sh.mu.Lock()
	sh.t.add(key, h, w)
	sh.mu.Unlock()
}

// arm makes a flush due in r.every, if none is.
func (r *refusals) arm() {
	if !r.armed.Load() && r.armed.CompareAndSwap(false, true) {
		r.timer.Reset(r.every)
	}
}

// tick is the timer's flush. The next refusal arms the next: none is
// armed after a failure, so that a store that is gone for good (its
// client closed) is not called forever.
func (r *refusals) tick() {
	r.armed.Store(false) // before the drain: what comes after arms anew
	ctx, cancel := context.WithTimeout(context.Background(), refusedTimeout)
	defer cancel()
	if err := r.flush(ctx); err != nil && r.failed != nil && !errors.Is(err, driver.ErrClosed) {
		r.failed(err)
	}
}

// flush adds the counts since the last flush to the store; when the
// store fails before it could have added them, they stay for the next.
// When it timed out (or ctx was canceled) they may have been added: they
// are dropped, so that a count stays a lower bound rather than count
// twice.
func (r *refusals) flush(ctx context.Context) error {
	for _, c := range r.caches {
		c.fold(r)
	}
	var batch []driver.RefusedKey
	for i := range r.sk {
		sh := &r.sk[i]
		sh.mu.Lock()
		if sh.t.len() > 0 {
			if batch == nil {
				batch = make([]driver.RefusedKey, 0, refusedShards*refusedShardSize)
			}
			batch = sh.t.drain(batch)
		}
		sh.mu.Unlock()
	}
	if len(batch) == 0 {
		return nil
	}
	if err := r.sink.AddRefused(ctx, r.policy, batch); err != nil {
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			for _, k := range batch {
				r.put(k.Key, k.Refusals)
			}
		}
		return err
	}
	return nil
}
