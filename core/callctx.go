package core

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// A store call's timeout means the store did not answer, not that this
// process was too busy to read an answer that came. A process whose CPU
// is saturated (a login server hashing every guess of a brute-force
// attack) schedules the goroutine that reads a reply long after the reply
// arrived; a timeout that fired then would switch the limiter to its
// failure policy while the store is healthy. So the wait of a store call
// ends at its timeout only when the process was responsive: when the
// timeout is noticed late, or the scheduler is slow to give a goroutine
// the CPU back, the process is starved, and the wait goes on (for as long
// as the starvation lasted, at least the timeout again) and is judged
// anew, up to maxStarved past the timeout.

// maxStarved bounds how far past its timeout a store call waits while
// the process is starved: a store that truly does not answer then costs
// a call at most this much more.
const maxStarved = time.Second

// starvedAfter returns the scheduling delay from which a process counts
// as starved for a call of timeout: an eighth of it, at least 1 ms.
func starvedAfter(timeout time.Duration) time.Duration {
	return max(time.Millisecond, timeout/8)
}

// callCtx is the context of one store call: Done closes once the call's
// timeout has passed while the process was responsive (see above), or,
// while it is starved, at most maxStarved later; Deadline reports that
// latest time. The caller's cancellation is noticed when the timeout is
// judged, not before: the timeout bounds every wait.
//
// Contexts are pooled, so that a decision allocates none: a store must
// not use its context after the call returns. The timer and channel are
// made on the first call to Done and kept from one use to the next.
type callCtx struct {
	context.Context // the caller's

	mu      sync.Mutex
	gen     uint64        // uses so far: a judgement of an earlier use is dropped
	timeout time.Duration // the limiter's
	soft    time.Time     // the timeout, or the caller's deadline if earlier
	hard    time.Time     // the latest Done closes
	target  time.Time     // when the timer is due
	ch      chan struct{} // closed when the call times out
	timer   *time.Timer   // runs expire
	armed   bool          // the timer runs for this use
	expired bool          // ch is closed
}

var callCtxPool = sync.Pool{New: func() any { return new(callCtx) }}

// newCallCtx returns the context of a store call made at start under
// parent with the limiter's timeout. Release it after the call.
func newCallCtx(parent context.Context, start time.Time, timeout time.Duration) *callCtx {
	c := callCtxPool.Get().(*callCtx)
	c.mu.Lock()
	c.gen++
	c.Context, c.timeout = parent, timeout
	c.soft = start.Add(timeout)
	c.hard = c.soft.Add(maxStarved)
	if d, ok := parent.Deadline(); ok {
		c.soft, c.hard = minTime(c.soft, d), minTime(c.hard, d)
	}
	c.mu.Unlock()
	return c
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// release ends a use and puts c back in the pool.
func (c *callCtx) release() {
	c.mu.Lock()
	c.gen++
	if c.armed {
		c.timer.Stop()
		c.armed = false
	}
	if c.expired {
		c.ch, c.expired = nil, false // a closed channel is not reused
	}
	c.Context = nil
	c.mu.Unlock()
	callCtxPool.Put(c)
}

// Deadline returns the latest time Done closes.
func (c *callCtx) Deadline() (time.Time, bool) { return c.hard, true }

// Done returns a channel closed when the call has timed out.
func (c *callCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch == nil {
		c.ch = make(chan struct{})
	}
	if !c.armed && !c.expired {
		c.armed, c.target = true, c.soft
		d := time.Until(c.soft)
		if c.timer == nil {
			c.timer = time.AfterFunc(d, c.expire)
		} else {
			c.timer.Reset(d)
		}
	}
	return c.ch
}

// Err returns the caller's error, or DeadlineExceeded once the call has
// timed out.
func (c *callCtx) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	expired := c.expired || !time.Now().Before(c.hard)
	c.mu.Unlock()
	if expired {
		return context.DeadlineExceeded
	}
	return nil
}

// expire judges a timeout that is due: the call times out unless the
// process was starved, in which case the wait goes on.
func (c *callCtx) expire() {
	c.mu.Lock()
	now := time.Now()
	if !c.armed || c.expired || now.Before(c.target) {
		c.mu.Unlock() // stopped, or a late run of an earlier use's timer
		return
	}
	gen, late, timeout, hard := c.gen, now.Sub(c.target), c.timeout, c.hard
	parentDone := callerErr(c.Context, now) != nil
	c.mu.Unlock()

	var lag time.Duration
	starved := false
	if !parentDone && now.Before(hard) {
		lag = starvation(late, starvedAfter(timeout))
		starved = lately.starved(lag >= starvedAfter(timeout), time.Now(), timeout)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen || !c.armed || c.expired {
		return // the call ended meanwhile
	}
	if starved {
		// A reply may be waiting for a goroutine to read it: give it as
		// long again as the process was held up, at least the timeout.
		next := minTime(time.Now().Add(max(lag, timeout)), hard)
		c.target = next
		c.timer.Reset(time.Until(next))
		return
	}
	c.armed, c.expired = false, true
	close(c.ch)
}

// lately remembers when the process was last seen starved, by any call:
// one quick yield in a process that is starved most of the time says
// little, so a call is judged responsive only once no call has seen
// starvation for a while.
var lately starvedSince

type starvedSince struct{ at atomic.Int64 } // unix nanoseconds

// starved records whether a judgement at now saw starvation, and reports
// whether the process counts as starved: it did now, or some call saw it
// within the last starvedMemory(timeout).
func (s *starvedSince) starved(seen bool, now time.Time, timeout time.Duration) bool {
	if seen {
		s.at.Store(now.UnixNano())
		return true
	}
	at := s.at.Load()
	return at != 0 && now.UnixNano()-at < int64(starvedMemory(timeout))
}

// starvedMemory is how long a sighting of starvation keeps the process
// counted as starved: five timeouts, at least 100 ms.
func starvedMemory(timeout time.Duration) time.Duration {
	return max(100*time.Millisecond, 5*timeout)
}

// starvation returns how long the process is held up before a runnable
// goroutine gets the CPU: late, how late a timer was noticed, or, when
// that is below limit, how long the scheduler takes to run this
// goroutine again after it yields, a few times over. A process with an idle CPU answers in
// microseconds; one whose CPU is saturated puts the goroutine behind
// every other runnable one.
func starvation(late, limit time.Duration) time.Duration {
	if late >= limit {
		return late
	}
	// A few yields, as a reply takes a few turns of the scheduler to be
	// read and handed over: on a full CPU each waits for some goroutine's
	// time slice to end, so together they see what one may not.
	t := time.Now()
	for range starvationYields {
		runtime.Gosched()
	}
	return max(late, time.Since(t))
}

// starvationYields is how many times starvation yields.
const starvationYields = 3

// callerErr returns the error of a caller's context that is done, or
// whose deadline has passed at now though its timer has not fired yet.
func callerErr(ctx context.Context, now time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !now.Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}
