package core

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ratekit/ratekit/core/driver"
)

// Store operations.
const (
	opPeek byte = iota
	opTake
	// opGrace is a take during the grace that follows the end of an
	// outage (see recover): the store is asked whether it would admit,
	// and the local fallback decides what it would.
	opGrace
)

// localRates decides rates on a [driver.Local] store: no timeout, circuit
// breaker, deny cache or fallback, which would only cost time.
type localRates struct{ l *Limiter }

func (r localRates) allow(ctx context.Context, key string, shard int, n int64) (d Decision, _ error) {
	l := r.l // on its own MemoryStore, AllowN decides in place instead (allowMem)
	res, err := l.store.Take(ctx, l.query(key, shard, n, l.stamp()))
	if err != nil {
		return Decision{}, fmt.Errorf("ratekit: policy %q: %w", l.policy.Name, err)
	}
	d.res = res
	l.decided(ctx, key, shard, n, res.Allowed, res.At, &d)
	return d, nil
}

func (r localRates) peek(ctx context.Context, key string, shard int) (Decision, error) {
	l := r.l
	res, err := l.store.Peek(ctx, l.query(key, shard, 1, l.stamp()))
	if err != nil {
		return Decision{}, fmt.Errorf("ratekit: policy %q: %w", l.policy.Name, err)
	}
	var d Decision
	d.res = res
	l.bind(&d, res.Allowed, SourceStore)
	return d, nil
}

func (r localRates) refund(ctx context.Context, t ticket) error {
	l := r.l
	if err := l.store.Refund(context.WithoutCancel(ctx), l.query(t.key, t.shard, t.n, time.Time{}), t.at); err != nil {
		return fmt.Errorf("ratekit: policy %q: refund: %w", l.policy.Name, err)
	}
	return nil
}

func (r localRates) reset(ctx context.Context, key string, shard int) error {
	return r.l.storeReset(context.WithoutCancel(ctx), key, shard)
}

func (r localRates) probe(ctx context.Context, q *driver.Query) error {
	_, err := r.l.store.Peek(ctx, *q)
	return err
}

// sharedRates decides rates on a shared store: each call bounded by the
// timeout, through a circuit breaker, with the deny cache in front and
// the failure policy behind.
type sharedRates struct{ l *Limiter }

func (r sharedRates) probe(ctx context.Context, q *driver.Query) error {
	_, err := r.l.store.Peek(ctx, *q)
	return err
}

func (r sharedRates) allow(ctx context.Context, key string, shard int, n int64) (Decision, error) {
	l := r.l
	now := l.now()
	if l.deny != nil {
		var d Decision
		if l.deny.get(key, n, now, false, &d) {
			l.emit(ctx, Event{Kind: EventDecision, Key: key, Cost: n, Decision: d})
			return d, nil
		}
	}
	q := l.query(key, shard, n, now)
	op := opTake
	if !l.recovered(time.Now()) {
		op = opGrace
	}
	return r.decide(ctx, q, shard, now, op)
}

// recovered reports whether decisions go to the store at now: not during
// the grace that follows the end of an outage (see recover).
func (l *Limiter) recovered(now time.Time) bool {
	until := l.recovering.Load()
	if until == 0 {
		return true
	}
	if now.UnixNano() < until {
		return false
	}
	l.recovering.CompareAndSwap(until, 0)
	return true
}

// recoveryGrace is how long, once the store answers again after an
// outage, a limiter of a fleet of several instances under FailLocal goes
// on deciding by its share: long enough for every instance to notice
// that the store answers (its breaker's cool-down, or the retry of what
// waits, replayRetry) and to tell it what it admitted without it. So the
// end of an outage hands out no fresh limit, before the others have
// counted.
const recoveryGrace = 2 * time.Second

// graceful reports whether the end of an outage holds l's decisions to
// its share a while (see recover): under FailLocal, sharing its limit
// with other instances.
func (l *Limiter) graceful() bool {
	return l.failure == FailLocal && l.fleet != nil && !l.wholeLimit && l.fleet() > 1
}

// recover starts the grace of a limiter that was deciding by its share
// of the limit because its circuit breaker had opened (an outage, not a
// call that failed alone), when the store answers again at now.
func (l *Limiter) recover(now time.Time) {
	if l.outage.CompareAndSwap(true, false) && l.graceful() {
		l.recovering.Store(now.Add(recoveryGrace).UnixNano())
	}
}

func (r sharedRates) peek(ctx context.Context, key string, shard int) (Decision, error) {
	now := r.l.now()
	return r.decide(ctx, r.l.query(key, shard, 1, now), shard, now, opPeek)
}

// decide asks the store, falling back by the failure policy. It fails
// only when ctx ends before the store answered.
func (r sharedRates) decide(ctx context.Context, q driver.Query, shard int, now time.Time, op byte) (Decision, error) {
	l := r.l
	take := op != opPeek
	var gen since
	if take && l.deny != nil {
		gen = l.deny.generation(q.Key)
	}
	var res driver.Result
	probed := false
	answered, lat, cause, err := l.call(ctx, &q, take, func(ctx context.Context, probe bool) (err error) {
		probed, err = r.ask(ctx, &q, op, probe, &res)
		return err
	})
	if err != nil {
		return Decision{}, err
	}
	var d Decision
	if answered && probed && (res.Allowed || res.Challenged) {
		// The store answers again, but the other instances may not have
		// told it yet what they admitted without it: this instance
		// decides as during the outage a while, keeping its share. The
		// store, asked first, denied what it would deny (a key it holds
		// full): the grace admits only what both admit.
		return r.unanswered(ctx, q, shard, now, take, nil), nil
	}
	if !answered {
		return r.unanswered(ctx, q, shard, now, take, cause), nil
	}
	d.res = res
	l.bind(&d, res.Allowed, SourceStore)
	if take {
		r.learn(ctx, &q, shard, now, gen, res, lat, &d)
	}
	return d, nil
}

// ask makes the store call of a decision of op into *res, and reports
// whether it was a probe that peeked instead of taking.
func (r sharedRates) ask(ctx context.Context, q *driver.Query, op byte, probe bool, res *driver.Result) (probed bool, err error) {
	l := r.l
	if op == opPeek {
		*res, err = l.store.Peek(ctx, *q)
		return false, err
	}
	if l.replay != nil {
		// What the failure policy admitted of the key counts first: the
		// store decides nothing of the key until it is told.
		if err := l.replay.before(ctx, q.Key); err != nil {
			return false, err
		}
	}
	if op == opGrace || probe && l.graceful() && l.outage.Load() {
		// The grace after an outage, or the circuit breaker's probe that
		// ends it: the store hears what this instance admitted without it
		// and decides nothing, since the other instances may not have
		// told theirs yet (see recover); what it would deny stays denied.
		*res, err = l.store.Peek(ctx, *q)
		return true, err
	}
	*res, err = l.store.Take(ctx, *q)
	return false, err
}

// unanswered decides q when the store did not answer, for cause, or
// during the grace after an outage (cause nil): by a denial cached before
// the store failed, which still holds, or else by the failure policy. A
// key denied before an outage stays denied through its grace: a store
// that came back empty would let the grace hand out the key's share
// while other instances, their grace over, take its whole limit from
// the store.
func (r sharedRates) unanswered(ctx context.Context, q driver.Query, shard int, now time.Time, take bool, cause error) Decision {
	l := r.l
	var d Decision
	if !take || l.deny == nil || !l.deny.get(q.Key, q.N, now, true, &d) {
		d = l.fallback(q, shard, take, l.breakers.of(&q))
		if take && !d.Allowed && !d.Challenged && d.Source == SourceLocal {
			l.refuse(q.Key)
		}
	}
	if take {
		l.fellBack(ctx, cause, &q)
		l.emit(ctx, Event{Kind: EventDecision, Key: q.Key, Cost: q.N, Decision: d})
	}
	return d
}

// learn completes d, the store's answer res to a take of q decided at
// now, and remembers what it teaches: the deny cache a denial, the local
// fallback store an admission or a lockout. A challenge teaches nothing:
// the key may pass it at any moment.
func (r sharedRates) learn(ctx context.Context, q *driver.Query, shard int, now time.Time, gen since, res driver.Result, lat time.Duration, d *Decision) {
	l := r.l
	if res.Allowed {
		d.ticket = ticket{owner: l.d, key: q.Key, shard: shard, at: res.At, n: q.N, mirror: l.mirror(q)}
	} else if !res.Challenged {
		// The cache entry counts the refusal, or else the limiter does.
		if l.deny == nil || !l.deny.put(q.Key, q.N, now, *d, gen) {
			l.refuse(q.Key)
		}
		l.mirrorLock(q, res.LockedFor)
	}
	l.emit(ctx, Event{Kind: EventDecision, Key: q.Key, Cost: q.N, Decision: *d, Latency: lat})
}

func (r sharedRates) refund(ctx context.Context, t ticket) error {
	l := r.l
	if l.deny != nil {
		// Once the units are back: a denial decided before then must not
		// be cached after.
		defer l.deny.remove(t.key)
	}
	q := l.query(t.key, t.shard, t.n, time.Time{})
	if t.local {
		if l.fb != nil {
			l.fb.Refund(&q, t.at)
		}
		if t.pend == nil {
			return nil
		}
		at := l.replay.refund(t.pend)
		if at == 0 {
			return nil // never recorded: nothing more to give back
		}
		t.at = at // recorded in the store since: given back there
	}
	if t.mirror != 0 {
		l.fb.Refund(&q, t.mirror)
	}
	cc := l.callCtx(ctx, time.Now())
	defer cc.release()
	if err := l.store.Refund(cc, q, t.at); err != nil {
		err = fmt.Errorf("ratekit: policy %q: refund: %w", l.policy.Name, err)
		l.emit(ctx, Event{Kind: EventStoreError, Key: t.key, Cost: t.n, Err: err})
		return err
	}
	return nil
}

// reset resets key in the store through the circuit breaker of its
// partition, as decisions go: when the store does not take it (it fails,
// or the breaker is open and no call is made), the key is reset in this
// instance (the caller does that whatever happens) and in the store once
// it answers, before its next decision of the key.
func (r sharedRates) reset(ctx context.Context, key string, shard int) error {
	l := r.l
	q := l.query(key, shard, 0, time.Time{})
	ok, _, cause, err := l.call(ctx, &q, true, func(ctx context.Context, _ bool) error { return l.store.Reset(ctx, q) })
	if err != nil {
		return fmt.Errorf("ratekit: policy %q: reset: %w", l.policy.Name, err)
	}
	if ok {
		return nil
	}
	return l.later(key, shard, true, cause)
}

// later keeps a reset (or a pass) of key that the store did not take
// because of cause (nil: the circuit breaker was open), to tell the store
// once it answers, and returns the error that says so.
func (l *Limiter) later(key string, shard int, reset bool, cause error) error {
	what := "pass"
	if reset {
		what = "reset"
	}
	if cause == nil {
		cause = errBreakerOpen
	}
	if l.replay == nil {
		return fmt.Errorf("ratekit: policy %q: %s: %w", l.policy.Name, what, cause)
	}
	l.replay.later(key, shard, reset)
	return fmt.Errorf("ratekit: policy %q: %s: the store did not take it (done in this instance, and in the store once it answers): %w",
		l.policy.Name, what, cause)
}

// errBreakerOpen is why the store did not take a call its circuit breaker
// held back.
var errBreakerOpen = errors.New("the store's circuit breaker is open")

// call makes f, one store call about q (a take when take is set, else a
// peek), through the circuit breaker of q's partition and under the
// limiter's timeout (see callCtx). It reports whether the store answered
// and how long it took. When it did not, cause is why (nil when the
// breaker was open and no call was made), and the breaker and the
// observers have learned of it; err is set only when the caller's context
// ended first, which says nothing about the store.
func (l *Limiter) call(ctx context.Context, q *driver.Query, take bool, f func(ctx context.Context, probe bool) error) (ok bool, lat time.Duration, cause, err error) {
	start := time.Now()
	waits.tick(start)
	br := l.breakers.of(q)
	var probe bool
	if take {
		ok, probe = br.allow(start)
	} else {
		ok = br.look(start)
	}
	if !ok {
		return false, 0, nil, nil
	}
	cc := l.callCtx(ctx, start)
	cause = f(cc, probe)
	cc.release()
	lat = time.Since(start)
	if cause == nil {
		if take {
			if br.success() {
				l.emit(ctx, Event{Kind: EventBreakerClose})
			}
			l.recover(start)
			l.answered(ctx, start)
			if l.replay != nil {
				l.replay.all() // the store answers: what was admitted without it counts there
			}
		}
		return true, lat, nil, nil
	}
	if cerr := callerErr(ctx, time.Now()); cerr != nil {
		// The caller gave up: that says nothing about the store.
		if probe {
			br.abandon()
		}
		return false, lat, cause, fmt.Errorf("ratekit: policy %q: %w", l.policy.Name, cerr)
	}
	if !take || errors.Is(cause, driver.ErrKeyFailure) {
		// A peek is not a decision, and one key's failure (a key
		// holding another type) says nothing of the store's health.
		if probe {
			br.abandon()
		}
	} else if br.failure(time.Now()) {
		l.outage.Store(true)
		defer l.emit(ctx, Event{Kind: EventBreakerOpen, Err: cause})
	}
	l.emit(ctx, Event{Kind: EventStoreError, Key: q.Key, Cost: q.N, Err: cause, Latency: lat})
	return false, lat, cause, nil
}
