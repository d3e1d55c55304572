package core

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekit/ratekit/core/driver"
)

// The end of an outage: what a limiter admitted by its failure policy
// while its store failed (FailLocal's local admissions, FailOpen's) is
// recorded in the store once it answers again ([driver.Recorder]), so
// that the end of an outage hands out no fresh limit: a fleet of one
// admits exactly the limit through any outage and its end, and a fleet
// of N stays within the outage's bound through the recovery too. A call
// whose outcome is unknown (sent, no answer in time) was decided by the
// failure policy: if that admitted it, it is recorded then, once more
// should the store have run it too, which can only under-admit.
//
// A reset or a pass that the store did not take (it failed, or its
// circuit breaker was open) holds in this instance at once, and is told
// to the store once it answers, before the admissions that came after it.
//
// What waits for a key is told before the store's next decision of the
// key, in the same deadline, and every key's in the background as soon
// as the store answers, so that the other instances count it too and
// keys without more traffic are not left out. The store decides a key
// only once what waited for it is told: a decision whose telling fails
// falls back, and one that finds the key's telling under way (in the
// background) waits for it.

// maxPending bounds the keys whose fallback admissions wait to be
// recorded; past it, the admissions of new keys are not recorded (the
// failure policy's own bound still holds).
const maxPending = fallbackMaxKeys

// replays holds a limiter's admissions made without its store, to record
// there once it answers.
type replays struct {
	rec   driver.Recorder
	l     *Limiter
	n     atomic.Int64 // keys pending
	told  atomic.Int64 // keys being told (flying)
	busy  atomic.Bool  // a background recording runs
	retry atomic.Bool  // the retry loop runs

	mu     sync.Mutex
	keys   map[string]*pendingKey   // by store key (a shard's, with shards)
	flying map[string]chan struct{} // keys being told, closed once told or put back
}

// pendingKey is what waits to be told to the store of one store key: a
// reset, then a pass, then admissions, in that order (a reset forgets
// what came before it).
type pendingKey struct {
	shard int
	reset bool // the key was reset while the store failed
	pass  bool // the key passed a challenge while the store failed
	units []*pending
}

// pending is one admission made without the store.
type pending struct {
	at      time.Time // when it was admitted, by the limiter's clock
	n       int64
	storeAt int64 // the store's time of the units, once recorded
	gone    bool  // refunded or recorded: not to record
}

func newReplays(l *Limiter, rec driver.Recorder) *replays {
	return &replays{rec: rec, l: l, keys: make(map[string]*pendingKey), flying: make(map[string]chan struct{})}
}

// add keeps an admission of n units of key (shard's) made at now without
// the store; nil when too many keys wait already.
func (r *replays) add(key string, shard int, n int64, now time.Time) *pending {
	r.mu.Lock()
	defer r.mu.Unlock()
	pk := r.keys[key]
	if pk == nil {
		if len(r.keys) >= maxPending {
			return nil
		}
		pk = &pendingKey{shard: shard}
		r.keys[key] = pk
		r.n.Add(1)
	}
	p := &pending{at: now, n: n}
	pk.units = append(pk.units, p)
	r.retrying()
	return p
}

// retrying makes sure what waits is tried again every replayRetry, even
// while the limiter decides nothing: so that an idle instance's fallback
// admissions count for the others within a second of the store
// answering. It stops once nothing waits (told, or out of every window of
// the policy); no goroutine waits in between, a timer does.
func (r *replays) retrying() {
	if r.retry.CompareAndSwap(false, true) {
		time.AfterFunc(replayRetry, r.tick)
	}
}

// tick is one try of retrying's.
func (r *replays) tick() {
	r.expire()
	if r.n.Load() == 0 {
		r.retry.Store(false)
		if r.n.Load() == 0 || !r.retry.CompareAndSwap(false, true) {
			return // nothing waits, or a new retrying took over
		}
	}
	r.all()
	time.AfterFunc(replayRetry, r.tick)
}

// expire drops the admissions that have left every window of the policy
// (and the keys left with nothing to tell): no store needs them any more.
func (r *replays) expire() {
	longest := r.l.longest
	if longest <= 0 {
		return // calendar periods: kept until told
	}
	cutoff := r.l.now().Add(-longest)
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, pk := range r.keys {
		live := pk.units[:0]
		for _, p := range pk.units {
			if !p.gone && p.at.After(cutoff) {
				live = append(live, p)
			}
		}
		pk.units = live
		if len(live) == 0 && !pk.reset && !pk.pass {
			delete(r.keys, k)
			r.n.Add(-1)
		}
	}
}

// refund takes back p, an admission refunded: it returns the store time
// of its units when they were recorded already (they are to be refunded
// there), else 0, and it will not be recorded.
func (r *replays) refund(p *pending) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p.storeAt != 0 {
		at := p.storeAt
		p.storeAt = 0
		return at
	}
	p.gone = true
	return 0
}

// close drops everything that waits: the store was closed.
func (r *replays) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, pk := range r.keys {
		for _, p := range pk.units {
			p.gone = true
		}
	}
	clear(r.keys)
	r.n.Store(0)
}

// forget drops what waits for key: it was reset in the store.
func (r *replays) forget(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if pk := r.keys[key]; pk != nil {
		for _, p := range pk.units {
			p.gone = true
		}
		delete(r.keys, key)
		r.n.Add(-1)
	}
}

// later keeps, for key (shard's), a reset or a pass that the store did
// not take: it is told once the store answers. A reset forgets the
// admissions and the pass waiting before it.
func (r *replays) later(key string, shard int, reset bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pk := r.keys[key]
	if pk == nil {
		pk = &pendingKey{shard: shard}
		r.keys[key] = pk
		r.n.Add(1)
	}
	if !reset {
		pk.pass = true
		return
	}
	for _, p := range pk.units {
		p.gone = true
	}
	pk.units, pk.reset, pk.pass = nil, true, false
}

// take removes and returns what waits for key, which is then being told
// until landed; or, while another call tells key, the channel closed
// once it has.
func (r *replays) take(key string) (*pendingKey, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ch := r.flying[key]; ch != nil {
		return nil, ch
	}
	pk := r.keys[key]
	if pk == nil {
		return nil, nil
	}
	delete(r.keys, key)
	r.n.Add(-1)
	r.flying[key] = make(chan struct{})
	r.told.Add(1)
	live := pk.units[:0]
	for _, p := range pk.units {
		if !p.gone {
			live = append(live, p)
		}
	}
	pk.units = live
	return pk, nil
}

// landed ends the telling of key that take began.
func (r *replays) landed(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ch := r.flying[key]; ch != nil {
		close(ch)
		delete(r.flying, key)
		r.told.Add(-1)
	}
}

// putBack returns to key what could not be told: before what came since.
func (r *replays) putBack(key string, rest *pendingKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pk := r.keys[key]
	if pk == nil {
		r.keys[key] = rest
		r.n.Add(1)
		return
	}
	if pk.reset {
		return // reset since: what came before goes
	}
	pk.reset, pk.pass = rest.reset, pk.pass || rest.pass
	pk.units = append(rest.units, pk.units...)
}

// record tells the store what waits for key, unless nothing does or
// another call tells it (see tell).
func (r *replays) record(ctx context.Context, key string) error {
	if pk, _ := r.take(key); pk != nil {
		return r.tell(ctx, key, pk)
	}
	return nil
}

// tell tells the store pk, what take returned for key, each in a store
// call of ctx: a reset, a pass, admissions; what fails waits for the next
// try, unless the store was closed for good. It returns the store's error
// when not everything was told.
func (r *replays) tell(ctx context.Context, key string, pk *pendingKey) error {
	defer r.landed(key)
	l := r.l
	now := l.now()
	fail := func(err error) error {
		if errors.Is(err, driver.ErrClosed) {
			r.close()
			return err
		}
		r.putBack(key, pk)
		return err
	}
	if pk.reset {
		if err := l.store.Reset(ctx, l.query(key, pk.shard, 0, time.Time{})); err != nil {
			return fail(err)
		}
		pk.reset = false
	}
	if pk.pass && l.passes != nil {
		if err := l.passes.Pass(ctx, l.query(key, pk.shard, 1, now)); err != nil {
			return fail(err)
		}
		pk.pass = false
	}
	for len(pk.units) > 0 {
		p := pk.units[0]
		q := l.query(key, pk.shard, p.n, now)
		at, err := r.rec.Record(ctx, q, max(0, now.Sub(p.at)))
		if err != nil {
			return fail(err)
		}
		pk.units = pk.units[1:]
		r.mu.Lock()
		if p.gone { // refunded meanwhile: the units go back
			r.mu.Unlock()
			_ = l.store.Refund(ctx, q, at)
			continue
		}
		p.storeAt, p.gone = at, true
		r.mu.Unlock()
	}
	return nil
}

// before records key's waiting admissions ahead of a store decision of
// the key, under the limiter's timeout, or waits for a recording of them
// under way; it returns the store's error (or ctx's) when they were not
// all told, and the store must not decide the key then.
func (r *replays) before(ctx context.Context, key string) error {
	if r.n.Load() == 0 && r.told.Load() == 0 {
		return nil
	}
	for {
		pk, ch := r.take(key)
		if ch != nil {
			select {
			case <-ch:
				continue // told, or put back to tell now
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if pk == nil {
			return nil
		}
		cc := r.l.callCtx(ctx, time.Now())
		err := r.tell(cc, key, pk)
		cc.release()
		return err
	}
}

// all records, from a goroutine of its own, every key's waiting
// admissions, once the store answers again; one such goroutine at a
// time, which ends when none is left or a call fails.
func (r *replays) all() {
	if r.n.Load() == 0 || !r.busy.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer r.busy.Store(false)
		for {
			r.mu.Lock()
			keys := make([]string, 0, min(len(r.keys), 256))
			for k := range r.keys {
				if len(keys) == cap(keys) {
					break
				}
				keys = append(keys, k)
			}
			r.mu.Unlock()
			if len(keys) == 0 {
				return
			}
			for _, k := range keys {
				ctx, cancel := context.WithTimeout(context.Background(), replayTimeout)
				err := r.record(ctx, k)
				cancel()
				if err != nil {
					return // the store fails again: the next answer retries
				}
			}
		}
	}()
}

// replayTimeout bounds each store call of a background recording, and
// replayRetry is how often what waits is tried again.
const (
	replayTimeout = time.Second
	replayRetry   = time.Second
)
