package core

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Wait is WaitN(ctx, key, 1).
func (l *Limiter) Wait(ctx context.Context, key string) (Decision, error) {
	return l.WaitN(ctx, key, 1)
}

// WaitN waits until n units for key fit every rule of the policy, records
// them and returns the admission, or returns an error when ctx ends first.
// It is AllowN for callers that would rather wait than be refused, such as
// calls to an SMS provider or a partner API that allows so many requests
// per second across the whole fleet: on a shared store (Redis) every instance's
// callers wait for the same windows.
//
// A denial is not returned: WaitN sleeps until its RetryAfter, plus a
// small random jitter (below 1/200 of the binding rule's window and below
// 2 ms), and asks again. Callers waiting for one key on one limiter queue
// in order of arrival, and only the first in line asks the store; the next asks once
// the first is admitted or gives up. So however many goroutines wait, an
// instance asks the store about a key from one goroutine at a time, and
// no caller starves behind later ones. Across instances the first callers
// in line compete, and the jitter, rather than the fastest link to the
// store, decides who asks first when units free. A caller that finds
// nobody waiting is decided at once, as by AllowN. A large request holds
// up the smaller ones queued behind it on its instance; those of other
// instances may pass it.
//
// When the wait a denial announces would end after ctx's deadline, WaitN
// fails at once with an error wrapping [context.DeadlineExceeded] instead
// of sleeping until the deadline, and so do the callers queued behind on
// this instance whose deadline comes before the wait ends. The announced
// wait is the RetryAfter, which assumes that nothing is refunded or reset
// meanwhile. Under Policy.Shards a RetryAfter is one shard's and another
// may have room sooner, so WaitN then waits until the deadline instead.
// Under Policy.InFlight no wait is known (a slot frees when a request
// ends): the first waiter in line asks again as soon as this instance
// releases a lease, and every 50 ms for releases on other instances,
// until its deadline.
//
// Store failures are resolved by the failure policy, as for AllowN:
// [FailOpen] admits at once; under [FailLocal] callers wait for the
// instance's local window (each instance then admits up to the limit on
// its own); a [FailClosed] refusal is waited out like a denial, until the
// limiter tries the store again (its RetryAfter) and the store admits, and
// fails at once, naming the store, when that comes after ctx's deadline.
// Every attempt is a decision the observers see.
//
// WaitN returns an error wrapping [ErrInvalidCost] at once when n is below
// 1 or above the smallest limit of the key's rules (it could never fit),
// and otherwise an error wrapping ctx.Err() or, as above,
// context.DeadlineExceeded; a Decision returned without error is Allowed,
// and can be refunded like any admission, or Challenged ([Rule].Challenge):
// waiting passes no challenge, so WaitN returns a challenge at once. WaitN sleeps on the
// process's clock, also under [WithClock].
func (l *Limiter) WaitN(ctx context.Context, key string, n int64) (Decision, error) {
	bk := boundKey(key)
	if l.queues().idle(bk) {
		// Nobody waits here, so nobody is passed: ask at once.
		d, err := l.AllowN(ctx, key, n)
		if err != nil || d.Allowed || d.Challenged {
			return d, err
		}
		return l.queue(ctx, key, bk, n, &d)
	}
	if err := l.checkCost(ctx, key, n); err != nil {
		return Decision{}, err
	}
	if err := ctx.Err(); err != nil {
		return Decision{}, fmt.Errorf("ratekit: policy %q: %w", l.policy.Name, err)
	}
	return l.queue(ctx, key, bk, n, nil)
}

// queue is WaitN in line: the caller waits for its turn, then for the key
// to fit n units. denied is the caller's own denial, if it was asked.
func (l *Limiter) queue(ctx context.Context, key, bk string, n int64, denied *Decision) (Decision, error) {
	w := &waiter{n: n, wake: make(chan struct{}, 1)}
	w.deadline, _ = ctx.Deadline()
	q := l.queues().join(bk, w)
	defer l.queues().leave(bk, q, w)
	// A denial's RetryAfter is exact, but for one shard of a key (another
	// may have room sooner) or under InFlight (a fixed hint: a unit frees
	// when a request ends): nobody is then told to give up early.
	inFlight := l.policy.InFlight > 0
	exact := l.shards == nil && !inFlight
	if denied != nil && l.queues().learn(q, w, *denied, exact) {
		return Decision{}, l.tooLate(*denied)
	}
	if err := l.queues().await(ctx, q, w); err != nil {
		return Decision{}, l.waitError(ctx, err)
	}
	// First in line: the only one here asking for key. Sleep until the
	// key can fit n units, as far as anyone here knows, and ask.
	var wait, window time.Duration
	if at, win, known := l.queues().next(q, n); known && !inFlight {
		wait, window = time.Until(at), win
	}
	for {
		if wait > 0 {
			if err := l.sleep(ctx, w, wait, window); err != nil {
				return Decision{}, err
			}
		}
		d, err := l.AllowN(ctx, key, n)
		if err != nil || d.Allowed || d.Challenged {
			return d, err
		}
		if l.queues().learn(q, w, d, exact) {
			return Decision{}, l.tooLate(d)
		}
		wait, window = max(d.RetryAfter, minWait), d.Window
		if inFlight {
			// A lease released here wakes the waiter at once; one
			// released on another instance is seen within a poll.
			wait, window = leasePoll, 0
		}
	}
}

// leasePoll is how often a waiter for a concurrency slot asks the store
// again, for leases released on other instances.
const leasePoll = 50 * time.Millisecond

// queues returns the lines of the limiter's waiters.
func (l *Limiter) queues() *waitQueues { return &l.waits }

// checkCost returns the error of AllowN for a cost that is invalid for
// key's rules, for a caller that queues without asking first.
func (l *Limiter) checkCost(ctx context.Context, key string, n int64) error {
	el := l
	if l.tiers != nil {
		if t := l.tier(ctx, key); t != nil {
			el = t
		}
	}
	if n < 1 || n > el.minLimit {
		return fmt.Errorf("ratekit: policy %q: cost %d outside 1..%d: %w", l.policy.Name, n, el.minLimit, ErrInvalidCost)
	}
	return nil
}

// sleep sleeps for wait plus the jitter of a rule of window, without
// passing w's deadline.
func (l *Limiter) sleep(ctx context.Context, w *waiter, wait, window time.Duration) error {
	wait += jitter(window)
	if !w.deadline.IsZero() {
		// The jitter must not push a wait that fits past the deadline.
		wait = min(wait, time.Until(w.deadline))
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-l.released.wait():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("ratekit: policy %q: %w", l.policy.Name, ctx.Err())
	}
}

// waitError wraps an error of waitQueues.await.
func (l *Limiter) waitError(ctx context.Context, err error) error {
	if errors.Is(err, errTooLate) {
		return fmt.Errorf("ratekit: policy %q: the wait of the callers ahead would exceed the context deadline: %w", l.policy.Name, context.DeadlineExceeded)
	}
	return fmt.Errorf("ratekit: policy %q: %w", l.policy.Name, ctx.Err())
}

// tooLate returns the error of a wait for denial d that would end after
// the deadline.
func (l *Limiter) tooLate(d Decision) error {
	if d.Source == SourceClosed {
		return fmt.Errorf("ratekit: policy %q: store unavailable (FailClosed) for %v, past the context deadline: %w", l.policy.Name, d.RetryAfter, context.DeadlineExceeded)
	}
	return fmt.Errorf("ratekit: policy %q: wait of %v would exceed the context deadline: %w", l.policy.Name, d.RetryAfter, context.DeadlineExceeded)
}
