package core

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"
)

// releases wakes the waiters of an InFlight policy when this instance
// releases a lease.
type releases struct {
	mu sync.Mutex
	ch chan struct{} // closed at the next release
}

// wait returns a channel closed at the next release; nil (never) for a
// policy without leases, whose limiter signals none.
func (r *releases) wait() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ch == nil {
		r.ch = make(chan struct{})
	}
	return r.ch
}

// signal wakes every waiter.
func (r *releases) signal() {
	r.mu.Lock()
	if r.ch != nil {
		close(r.ch)
		r.ch = nil
	}
	r.mu.Unlock()
}

// minWait is the shortest sleep after a denial, so that a denial with no
// RetryAfter cannot make a waiter spin on the store.
const minWait = 100 * time.Microsecond

// maxJitter bounds the jitter added to a waiter's sleep.
const maxJitter = 2 * time.Millisecond

// jitter returns a random extra sleep after a denial by a rule of window:
// uniform in [0, min(window/200, maxJitter)). Waiters of several instances
// denied together then ask again one after another, in random order,
// rather than all at the moment a unit frees; it costs a waiter at most
// 0.5% of the window per admission.
func jitter(window time.Duration) time.Duration {
	j := min(window/200, maxJitter)
	if j <= 0 {
		return 0
	}
	return rand.N(j)
}

// waitQueues holds the callers of [Limiter.WaitN] waiting on one limiter,
// per key, in order of arrival. The zero value is ready to use.
type waitQueues struct {
	mu sync.Mutex
	m  map[string]*waitQueue
}

// waitQueue is the line of one key. Its first waiter is the only one that
// asks the store.
type waitQueue struct {
	line []*waiter
	// next is the earliest time a request of nextN or more units can fit,
	// as the last denial said; zero when unknown. A denial's RetryAfter is
	// when the oldest entries leave the window, and admissions only add
	// entries, so it stays a lower bound after later admissions.
	next   time.Time
	nextN  int64
	window time.Duration // the window of the rule that denied
	// exact is false when next may be late for some shard (Policy.Shards):
	// nobody is then told to give up early.
	exact bool
}

// waiter is one caller of WaitN in a line.
type waiter struct {
	n        int64
	deadline time.Time     // zero: none
	wake     chan struct{} // signalled when w heads the line or is too late
	late     bool          // the line's wait ends after deadline
}

// errTooLate is what await returns for a waiter whose wait would end
// after its deadline.
var errTooLate = fmt.Errorf("ratekit: wait would exceed the context deadline: %w", context.DeadlineExceeded)

// idle reports whether nobody waits for key.
func (ws *waitQueues) idle(key string) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.m[key] == nil
}

// join puts w at the end of key's line and returns the line.
func (ws *waitQueues) join(key string, w *waiter) *waitQueue {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	q := ws.m[key]
	if q == nil {
		if ws.m == nil {
			ws.m = make(map[string]*waitQueue)
		}
		q = &waitQueue{}
		ws.m[strings.Clone(key)] = q // kept: see memPolicy.insert
	}
	q.line = append(q.line, w)
	if len(q.line) == 1 {
		w.signal()
	} else if q.dooms(w) {
		w.late = true
		w.signal()
	}
	return q
}

// leave takes w out of key's line; when w was first, the next waiter's
// turn comes.
func (ws *waitQueues) leave(key string, q *waitQueue, w *waiter) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for i, x := range q.line {
		if x != w {
			continue
		}
		copy(q.line[i:], q.line[i+1:])
		q.line[len(q.line)-1] = nil
		q.line = q.line[:len(q.line)-1]
		if i == 0 && len(q.line) > 0 {
			q.line[0].signal()
		}
		break
	}
	if len(q.line) == 0 && ws.m[key] == q {
		delete(ws.m, key)
	}
}

// await waits until w is first in line. It returns errTooLate when the
// wait of the line already ends after w's deadline, or ctx's error.
func (ws *waitQueues) await(ctx context.Context, q *waitQueue, w *waiter) error {
	for {
		select {
		case <-w.wake:
		case <-ctx.Done():
			return ctx.Err()
		}
		ws.mu.Lock()
		first, late := q.line[0] == w, w.late
		ws.mu.Unlock()
		switch {
		case late:
			return errTooLate
		case first:
			return nil
		}
	}
}

// learn records denial d of w's request: the key cannot fit w.n units
// before d.RetryAfter. When exact (the RetryAfter is the key's, not one
// shard's), waiters behind w whose deadline comes before then are told to
// give up, and learn reports whether w's own deadline comes before then.
func (ws *waitQueues) learn(q *waitQueue, w *waiter, d Decision, exact bool) (late bool) {
	at := time.Now().Add(max(d.RetryAfter, minWait))
	ws.mu.Lock()
	defer ws.mu.Unlock()
	q.next, q.nextN, q.window, q.exact = at, w.n, d.Window, exact
	for _, x := range q.line {
		if x != w && !x.late && q.dooms(x) {
			x.late = true
			x.signal()
		}
	}
	return q.dooms(w)
}

// next returns when a request of n units can fit at the earliest, as far
// as q knows, and the window of the rule that said so.
func (ws *waitQueues) next(q *waitQueue, n int64) (at time.Time, window time.Duration, known bool) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if q.next.IsZero() || n < q.nextN {
		return time.Time{}, 0, false
	}
	return q.next, q.window, true
}

// dooms reports whether w's deadline comes before its request can fit.
func (q *waitQueue) dooms(w *waiter) bool {
	return q.exact && !w.deadline.IsZero() && w.n >= q.nextN && !q.next.IsZero() && w.deadline.Before(q.next)
}

// signal wakes w, if it is not already due to wake.
func (w *waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}
