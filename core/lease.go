package core

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/core/internal/memstore"
)

// Concurrency limits (Policy.InFlight): every admission takes a lease of
// its units, held until the decision is refunded (the request ended) or,
// on Redis, until its TTL passes without a renewal (the instance that
// took it died). A limiter renews the Redis leases it holds from one
// goroutine, which runs while it holds some and ends at the first renewal
// round that finds none.

// leaseRetry is a denial's RetryAfter under an InFlight policy: a fixed
// hint, since a lease frees when a request ends, which no store can
// foresee.
const leaseRetry = time.Second

// renewBatch is the most lease operations one renewal round trip carries.
const renewBatch = 1000

// errLeaseLost is reported when a renewal finds a lease gone before its
// release.
var errLeaseLost = errors.New("lease lost before its release: the key was reset, its renewals failed for a whole LeaseTTL, or Redis lost it")

// inFlight decides an InFlight policy on a store with [driver.Leases]: every
// admission takes a lease of its units, held until the decision is
// refunded. On a shared store the leases are renewed from one goroutine
// while the limiter holds some.
type inFlight struct {
	l      *Limiter
	store  driver.Leases
	shared bool // not Local: timeout, breaker, renewals and fallback
	limit  int64
	ttl    time.Duration
	owner  int64            // random: the limiter's lease ids are (owner, seq)
	seq    atomic.Int64     // the next seq; a lease of n units takes n of them
	rules  []driver.Rule    // {Limit: limit}, for the breaker's partition
	local  *memstore.Leases // the FailLocal fallback's, on a shared store

	mu      sync.Mutex
	held    map[int64]*heldLease // shared leases to renew or release, by seq
	running bool                 // the renewal goroutine is alive
}

// heldLease is a lease of the limiter on a shared store.
type heldLease struct {
	key     string // the bounded key
	n       int64
	release bool      // to release: its release failed, or its take's answer was lost
	since   time.Time // when it was marked so
}

// inFlight completes l, a limiter of an InFlight policy.
func (l *Limiter) inFlight(o options, local bool) error {
	p := &l.policy
	if o.tierFunc != nil || o.tiers != nil {
		return fmt.Errorf("ratekit: policy %q: WithTiers does not apply to an InFlight policy: %w", p.Name, ErrInvalidPolicy)
	}
	store, ok := l.store.(driver.Leases)
	if !ok {
		return fmt.Errorf("ratekit: policy %q: InFlight needs a store that keeps leases (driver.Leases); %T does not: %w",
			p.Name, l.store, ErrInvalidPolicy)
	}
	f := &inFlight{
		l:      l,
		store:  store,
		shared: !local,
		limit:  p.InFlight,
		ttl:    p.leaseTTL(),
		owner:  1 + rand.Int64N(1<<52-1),
		rules:  []driver.Rule{{Limit: p.InFlight}},
		held:   make(map[int64]*heldLease),
	}
	if l.local != nil {
		f.local = memstore.LeasesOf(l.local, p.Name)
	}
	l.d = f
	return nil
}

// lease returns the lease of n units of key starting at seq.
func (f *inFlight) lease(key string, seq, n int64) driver.Lease {
	return driver.Lease{Policy: f.l.policy.Name, Key: key, Owner: f.owner, Seq: seq, N: n, Limit: f.limit, TTL: f.ttl, Now: f.l.storeNow()}
}

// decision returns the decision of a lease request that saw used units
// held (after it, when admitted) under limit.
func (f *inFlight) decision(allowed bool, used, limit int64, src Source) Decision {
	d := Decision{Allowed: allowed, Limit: limit, Remaining: max(0, limit-used), Source: src}
	st := RuleState{Limit: limit, Used: used}
	if !allowed {
		d.RetryAfter, st.RetryAfter = leaseRetry, leaseRetry
	}
	d.res.Rules.Append(st)
	return d
}

func (f *inFlight) allow(ctx context.Context, key string, _ int, n int64) (Decision, error) {
	l := f.l
	seq := f.seq.Add(n) - n
	ls := f.lease(key, seq, n)
	if !f.shared {
		ok, held, err := f.store.TakeLease(ctx, ls)
		if err != nil {
			return Decision{}, fmt.Errorf("ratekit: policy %q: %w", l.policy.Name, err)
		}
		d := f.decision(ok, held, f.limit, SourceStore)
		if ok {
			d.ticket = ticket{owner: l.d, key: key, at: seq, n: n}
		} else {
			l.refuse(key)
		}
		l.emit(ctx, Event{Kind: EventDecision, Key: key, Cost: n, Decision: d})
		return d, nil
	}
	q := driver.Query{Policy: l.policy.Name, Key: key, Rules: f.rules, N: n}
	var (
		ok   bool
		held int64
	)
	answered, lat, cause, err := l.call(ctx, &q, true, func(ctx context.Context, _ bool) (err error) {
		ok, held, err = f.store.TakeLease(ctx, ls)
		return err
	})
	if cause != nil && !errors.Is(cause, driver.ErrKeyFailure) {
		// The take may have been made with its answer lost: its units
		// are released in the background, not left until their TTL.
		f.keep(seq, &heldLease{key: key, n: n, release: true, since: time.Now()})
	}
	if err != nil {
		return Decision{}, err
	}
	if answered {
		d := f.decision(ok, held, f.limit, SourceStore)
		if ok {
			d.ticket = ticket{owner: l.d, key: key, at: seq, n: n}
			f.keep(seq, &heldLease{key: key, n: n})
			if f.local != nil {
				// Mirrored, so that a fallback counts it.
				f.local.Take(key, f.owner, seq, n, math.MaxInt64)
			}
		} else {
			l.refuse(key)
		}
		l.emit(ctx, Event{Kind: EventDecision, Key: key, Cost: n, Decision: d, Latency: lat})
		return d, nil
	}
	d := f.fallback(key, seq, n, true, l.breakers.of(&q))
	if !d.Allowed && d.Source == SourceLocal {
		l.refuse(key)
	}
	l.fellBack(ctx, cause, &q)
	l.emit(ctx, Event{Kind: EventDecision, Key: key, Cost: n, Decision: d})
	return d, nil
}

func (f *inFlight) peek(ctx context.Context, key string, _ int) (Decision, error) {
	l := f.l
	ls := f.lease(key, 0, 1)
	var held int64
	if !f.shared {
		held, err := f.store.HeldLeases(ctx, ls)
		if err != nil {
			return Decision{}, fmt.Errorf("ratekit: policy %q: %w", l.policy.Name, err)
		}
		return f.decision(held < f.limit, held, f.limit, SourceStore), nil
	}
	q := driver.Query{Policy: l.policy.Name, Key: key, Rules: f.rules, N: 1}
	answered, _, _, err := l.call(ctx, &q, false, func(ctx context.Context, _ bool) (err error) {
		held, err = f.store.HeldLeases(ctx, ls)
		return err
	})
	switch {
	case err != nil:
		return Decision{}, err
	case answered:
		return f.decision(held < f.limit, held, f.limit, SourceStore), nil
	}
	return f.fallback(key, 0, 1, false, l.breakers.of(&q)), nil
}

// fallback decides a lease request without the store.
func (f *inFlight) fallback(key string, seq, n int64, take bool, br *breaker) Decision {
	l := f.l
	switch l.failure {
	case FailOpen:
		return Decision{Allowed: true, Limit: f.limit, Remaining: f.limit, Source: SourceOpen}
	case FailClosed:
		return Decision{Limit: f.limit, RetryAfter: br.retryAfter(time.Now()), Source: SourceClosed}
	}
	var buf [1]driver.Rule
	limit := l.shareOf(f.rules, buf[:0])[0].Limit
	if !take {
		used := f.local.Count(key)
		return f.decision(used < limit, used, limit, SourceLocal)
	}
	used, ok := f.local.Take(key, f.owner, seq, n, limit)
	d := f.decision(ok, used, limit, SourceLocal)
	if ok {
		d.ticket = ticket{owner: l.d, key: key, at: seq, n: n, local: true}
	}
	return d
}

// refund releases the lease a ticket of this limiter identifies, and
// wakes the limiter's waiters.
func (f *inFlight) refund(ctx context.Context, t ticket) error {
	defer f.l.released.signal()
	l := f.l
	if t.local {
		f.local.Release(t.key, f.owner, t.at)
		return nil
	}
	ls := f.lease(t.key, t.at, t.n)
	if !f.shared {
		return f.store.ReleaseLease(context.WithoutCancel(ctx), ls)
	}
	// No renewal from now on: one still in flight finds the lease gone,
	// or is undone by this release, since a renewal never adds units.
	f.drop(t.at)
	if f.local != nil {
		f.local.Release(t.key, f.owner, t.at) // the mirror
	}
	cc := l.callCtx(ctx, time.Now())
	err := f.store.ReleaseLease(cc, ls)
	cc.release()
	if err != nil {
		// Tried again with the renewals, until it succeeds or the lease
		// has expired anyway.
		f.keep(t.at, &heldLease{key: t.key, n: t.n, release: true, since: time.Now()})
		err = fmt.Errorf("ratekit: policy %q: release: %w", l.policy.Name, err)
		l.emit(ctx, Event{Kind: EventStoreError, Key: t.key, Cost: t.n, Err: err})
		return err
	}
	return nil
}

func (f *inFlight) probe(ctx context.Context, q *driver.Query) error {
	_, err := f.store.HeldLeases(ctx, f.lease(q.Key, 0, 1))
	return err
}

func (f *inFlight) reset(ctx context.Context, key string, shard int) error {
	if f.local != nil {
		f.local.Forget(key)
	}
	return f.l.storeReset(ctx, key, shard)
}

// keep registers a shared lease to renew (or to release, h.release),
// starting the renewal goroutine if it is not running.
func (f *inFlight) keep(seq int64, h *heldLease) {
	h.key = strings.Clone(h.key) // kept: see memPolicy.insert
	f.mu.Lock()
	f.held[seq] = h
	if !f.running {
		f.running = true
		go f.renewLoop()
	}
	f.mu.Unlock()
}

// drop forgets a lease. The renewal goroutine ends at its next round if
// none is left: not at once, so that a limiter whose requests come one
// at a time does not start a goroutine for each.
func (f *inFlight) drop(seq int64) {
	f.mu.Lock()
	delete(f.held, seq)
	f.mu.Unlock()
}

// idle reports whether no lease is left, marking the renewal goroutine
// ended if so.
func (f *inFlight) idle() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.held) == 0 {
		f.running = false
		return true
	}
	return false
}

// renewLoop renews the limiter's shared leases every third of their TTL,
// and retries the releases that failed, until a round finds no lease.
func (f *inFlight) renewLoop() {
	tick := time.NewTicker(f.ttl / 3)
	defer tick.Stop()
	for range tick.C {
		if f.idle() {
			return
		}
		f.renew(context.Background())
	}
}

// renewal is a lease the renewal round looks at.
type renewal struct {
	seq int64
	h   *heldLease
}

// renew makes one round of renewals and retried releases, each round
// trip bounded by a third of the TTL. Leases found gone and failed round
// trips are reported to the observers.
func (f *inFlight) renew(ctx context.Context) {
	f.mu.Lock()
	var renews, releases []renewal
	for seq, h := range f.held {
		if h.release {
			releases = append(releases, renewal{seq, h})
		} else {
			renews = append(renews, renewal{seq, h})
		}
	}
	f.mu.Unlock()
	lost, failed, firstErr := f.renewAll(ctx, renews)
	if n, err := f.releaseAll(ctx, releases); n > 0 {
		failed += n
		if firstErr == nil {
			firstErr = err
		}
	}
	for _, r := range lost {
		f.l.emit(ctx, Event{Kind: EventStoreError, Key: r.h.key, Cost: r.h.n,
			Err: fmt.Errorf("ratekit: policy %q: %w", f.l.policy.Name, errLeaseLost)})
	}
	if failed > 0 {
		f.l.emit(ctx, Event{Kind: EventStoreError,
			Err: fmt.Errorf("ratekit: policy %q: renewing or releasing %d leases: %w", f.l.policy.Name, failed, firstErr)})
	}
}

// renewAll renews rs, renewBatch at a time, and returns the leases found
// gone (forgotten since) and how many could not be renewed, with the
// first error.
func (f *inFlight) renewAll(ctx context.Context, rs []renewal) (lost []renewal, failed int, firstErr error) {
	for len(rs) > 0 {
		chunk := rs[:min(len(rs), renewBatch)]
		rs = rs[len(chunk):]
		ls := make([]driver.Lease, len(chunk))
		for i, r := range chunk {
			ls[i] = f.lease(r.h.key, r.seq, r.h.n)
		}
		held := make([]bool, len(chunk))
		rctx, cancel := context.WithTimeout(ctx, f.ttl/3)
		err := f.store.RenewLeases(rctx, ls, held)
		cancel()
		if err != nil {
			failed += len(chunk)
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		f.mu.Lock()
		for i, r := range chunk {
			if !held[i] && f.held[r.seq] == r.h { // not released or replaced meanwhile
				delete(f.held, r.seq)
				lost = append(lost, r)
				if f.local != nil {
					f.local.Release(r.h.key, f.owner, r.seq)
				}
			}
		}
		f.mu.Unlock()
	}
	return lost, failed, firstErr
}

// releaseAll retries the releases rs and returns how many failed again,
// with the first error. A lease whose release keeps failing is forgotten
// once its TTL has passed: it has expired anyway.
func (f *inFlight) releaseAll(ctx context.Context, rs []renewal) (failed int, firstErr error) {
	for _, r := range rs {
		rctx, cancel := context.WithTimeout(ctx, f.ttl/3)
		err := f.store.ReleaseLease(rctx, f.lease(r.h.key, r.seq, r.h.n))
		cancel()
		f.mu.Lock()
		mine := f.held[r.seq] == r.h
		switch {
		case err == nil && mine:
			delete(f.held, r.seq)
		case err != nil && mine && time.Since(r.h.since) > f.ttl:
			delete(f.held, r.seq)
		}
		f.mu.Unlock()
		if err != nil {
			failed++
			if firstErr == nil {
				firstErr = err
			}
		}
	}
	return failed, firstErr
}
