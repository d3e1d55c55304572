package core

import (
	"context"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekit/ratekit/core/driver"
)

// A store call's timeout means the store did not answer, not that this
// process was too busy to read an answer that came. A process whose CPU
// is saturated (a login server hashing every guess of a brute-force
// attack) notices a reply and schedules the goroutine that reads it long
// after the reply arrived; a timeout that fired then would switch the
// limiter to its failure policy while the store is healthy. So when a
// call's timeout falls due, it is judged: if the timeout was noticed late,
// or the scheduler is busy (every P running with goroutines waiting, or
// slow to run a goroutine that yields), or was so for any call lately,
// the process is starved, and the call
// waits on, twice as long as the process was held up (plus the time a
// busy scheduler takes to notice a reply), and is judged again, up to
// maxStarved past the timeout. Only a call judged in a responsive
// process times out. On a store that tells whether its server has sent
// anything since the call began ([driver.Replies]), a starved process
// waits for a server that sent nothing only until frozen timeouts have
// passed: it did not answer, however busy this process is.

// maxStarved bounds how far past its timeout a store call waits while
// the process is starved: a store that truly does not answer then costs
// a call at most this much more.
const maxStarved = time.Second

// frozen is how many timeouts a call waits at most, starved process or
// not, on a store that tells that its server has sent nothing since the
// call began ([driver.Replies]): the store does not answer (a paused,
// frozen or unreachable server), and the process's business does not
// excuse it.
const frozen = 10

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
	gen     uint64         // uses so far: a judgement of an earlier use is dropped
	timeout time.Duration  // the limiter's
	start   time.Time      // when the call began
	replies driver.Replies // tells whether a reply waits unread; nil: cannot
	soft    time.Time      // the timeout, or the caller's deadline if earlier
	hard    time.Time      // the latest Done closes
	target  time.Time      // when the timer is due
	ch      chan struct{}  // closed when the call times out
	timer   *time.Timer    // runs expire
	armed   bool           // the timer runs for this use
	expired bool           // ch is closed
}

var callCtxPool = sync.Pool{New: func() any { return new(callCtx) }}

// released is the caller's context of a call that has ended: canceled,
// without values. closedCh is its Done.
var (
	released, closedCh = func() (context.Context, <-chan struct{}) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		return ctx, ctx.Done()
	}()
)

// newCallCtx returns the context of a store call made at start under
// parent with the limiter's timeout. Release it after the call.
func newCallCtx(parent context.Context, start time.Time, timeout time.Duration) *callCtx {
	c := callCtxPool.Get().(*callCtx)
	c.mu.Lock()
	c.gen++
	c.Context, c.timeout, c.start, c.replies = parent, timeout, start, nil
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
	c.Context = released
	c.mu.Unlock()
	callCtxPool.Put(c)
}

// Deadline returns the latest time Done closes.
func (c *callCtx) Deadline() (time.Time, bool) { return c.hard, true }

// Done returns a channel closed when the call has timed out. Once the
// call has ended (released), the context is done (Err: Canceled) and
// arms nothing: Go's own context machinery may ask a context for Done,
// Err and values after the call that used it returned (the goroutine
// context.WithDeadline starts for a parent it does not know, as a dial's
// does), and must not find a timer to arm or a nil parent.
func (c *callCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.Context == released {
		return closedCh
	}
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
// timed out. It reads the caller's context under c.mu, as Value does: a
// goroutine of Go's context machinery may ask after the call ended, while
// the pooled context serves another call.
func (c *callCtx) Err() error {
	c.mu.Lock()
	parent := c.Context
	expired := c.expired || !time.Now().Before(c.hard)
	c.mu.Unlock()
	if err := parent.Err(); err != nil {
		return err
	}
	if expired {
		return context.DeadlineExceeded
	}
	return nil
}

// Value returns the caller's value for key (see Err).
func (c *callCtx) Value(key any) any {
	c.mu.Lock()
	parent := c.Context
	c.mu.Unlock()
	return parent.Value(key)
}

// expire judges a timeout that is due: the call times out unless the
// process was starved, in which case the wait goes on.
func (c *callCtx) expire() {
	c.mu.Lock()
	now := time.Now()
	if !c.armed || c.expired || now.Before(c.target) || c.Context == released {
		c.mu.Unlock() // stopped, or a late run of an earlier use's timer
		return
	}
	gen, late, timeout, hard, start, replies := c.gen, now.Sub(c.target), c.timeout, c.hard, c.start, c.replies
	parentDone := callerErr(c.Context, now) != nil
	c.mu.Unlock()

	var wait time.Duration // how much longer to wait; 0: the call times out
	switch {
	case parentDone || !now.Before(hard):
	case replies != nil && silent(replies, start):
		// The server has sent nothing since the call began: the store
		// does not answer. A starved process waits on, no later than
		// frozen timeouts past the call's start (asking again each
		// timeout); a responsive one times out now.
		if until := start.Add(frozen * timeout); now.Before(until) && lately.starved(late, now, timeout) {
			wait = min(timeout, until.Sub(now))
		}
	default:
		wait = lately.judge(starvation(late, starvedAfter(timeout)), time.Now(), timeout)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen || !c.armed || c.expired {
		return // the call ended meanwhile
	}
	if wait > 0 {
		// A reply may be waiting for a goroutine to read it.
		next := minTime(time.Now().Add(wait), hard)
		c.target = next
		c.timer.Reset(time.Until(next))
		return
	}
	c.armed, c.expired = false, true
	close(c.ch)
}

// silent reports that replies tells that the server has sent nothing
// since start.
func silent(replies driver.Replies, start time.Time) bool {
	answered, known := replies.Answered(start)
	return known && !answered
}

// lately remembers when the process was last seen busy, by any call: on
// a saturated CPU one quick turn of the scheduler says little, so a call
// is judged responsive only once no call has seen the scheduler busy for
// a while.
var lately starvedSince

type starvedSince struct {
	at  atomic.Int64 // unix nanoseconds of the last sighting
	lag atomic.Int64 // its wait to run, nanoseconds
}

// starved reports, without running the scheduler's measurement (which a
// saturated process makes slow), whether the process is starved at now
// for a call of timeout noticed late by late: noticed late by
// starvedAfter(timeout) or more, or goroutines lately waiting that long
// to run, now or for any call judged within starvedMemory(timeout).
func (s *starvedSince) starved(late time.Duration, now time.Time, timeout time.Duration) bool {
	limit := starvedAfter(timeout)
	if late >= limit {
		return true
	}
	if at := s.at.Load(); at != 0 && now.UnixNano()-at < int64(starvedMemory(timeout)) {
		return true
	}
	if waits.busy(now, limit) {
		s.at.Store(now.UnixNano())
		return true
	}
	return false
}

// netpollDelay is how late a busy Go scheduler may notice that a reply
// has come: with every P running, the network is polled by sysmon, every
// 10 ms.
const netpollDelay = 10 * time.Millisecond

// judge returns how much longer a call of timeout waits for its answer
// at now, given a measurement of the scheduler (see starvation); 0 when
// the call times out. With limit = starvedAfter(timeout):
//   - a timeout noticed late by limit or more (the process was held up,
//     by the OS or the runtime) waits twice as long again;
//   - a busy scheduler (every P running with goroutines waiting, or slow
//     by limit or more to run a goroutine that yields) notices and reads
//     a reply late: the call waits twice the scheduler's delay plus
//     netpollDelay, and so does every call judged within
//     starvedMemory(timeout), even one that finds the scheduler quick.
func (s *starvedSince) judge(m schedState, now time.Time, timeout time.Duration) time.Duration {
	limit := starvedAfter(timeout)
	run, busy := m.run, m.busy || m.run >= limit
	if busy {
		s.at.Store(now.UnixNano())
		s.lag.Store(int64(run))
	} else if at := s.at.Load(); at != 0 && now.UnixNano()-at < int64(starvedMemory(timeout)) {
		run, busy = max(run, time.Duration(s.lag.Load())), true
	}
	var wait time.Duration
	if m.late >= limit {
		wait = 2 * m.late
	}
	if busy {
		wait = max(wait, 2*run+netpollDelay)
	}
	return wait
}

// starvedMemory is how long a sighting of a busy scheduler keeps the
// process counted as starved: five timeouts, at least 100 ms.
func starvedMemory(timeout time.Duration) time.Duration {
	return max(100*time.Millisecond, 5*timeout)
}

// schedState is a measurement of the scheduler when a call's timeout
// falls due.
type schedState struct {
	late time.Duration // how late the timeout was noticed
	run  time.Duration // how long the scheduler took to run a goroutine that yielded
	busy bool          // goroutines lately waited long to run
}

// starvation measures the scheduler for a timeout noticed late by less
// than limit (one noticed later needs no more): how long the scheduler
// takes to run a goroutine again after it yields, a few times over, and
// whether goroutines have lately waited limit or more to run (see
// schedWaits). A process whose CPU is idle answers in microseconds; on a
// saturated one each yield waits for some goroutine's time slice to end,
// and a reply waits for the network to be polled. Calls whose timeouts
// fall due together share one measurement, so that their own goroutines
// do not make each other wait.
func starvation(late, limit time.Duration) schedState {
	if late >= limit {
		return schedState{late: late}
	}
	m := probe.measure(limit)
	m.late = late
	return m
}

// starvationYields is how many times a measurement yields.
const starvationYields = 3

// probeFresh is how long a measurement serves the calls judged after it.
const probeFresh = time.Millisecond

// probe measures the scheduler for every call: one measurement at a
// time, which the calls judged meanwhile wait for, parked.
var probe schedProbe

type schedProbe struct {
	mu      sync.Mutex
	cur     *probeRun  // the measurement under way, if any
	last    time.Time  // when the last one ended
	lastRun schedState // what it found
}

type probeRun struct {
	done chan struct{}
	m    schedState
}

func (p *schedProbe) measure(limit time.Duration) schedState {
	p.mu.Lock()
	if time.Since(p.last) < probeFresh {
		m := p.lastRun
		p.mu.Unlock()
		return m
	}
	if r := p.cur; r != nil {
		p.mu.Unlock()
		<-r.done
		return r.m
	}
	r := &probeRun{done: make(chan struct{})}
	p.cur = r
	p.mu.Unlock()
	t := time.Now()
	for range starvationYields {
		runtime.Gosched()
	}
	r.m.run = time.Since(t)
	r.m.busy = waits.busy(time.Now(), limit)
	p.mu.Lock()
	p.cur, p.last, p.lastRun = nil, time.Now(), r.m
	p.mu.Unlock()
	close(r.done)
	return r.m
}

// waits samples how long the process's goroutines wait to run, from the
// runtime's histogram of scheduling latencies: a saturated CPU makes
// many wait a whole time slice of another (10 ms), where the goroutines
// of a burst of work in an idle process wait microseconds. Limiters keep
// it fresh: every store call offers a sample (see tick), taken at most
// every waitsEvery.
var waits schedWaits

// waitsEvery is how often waits reads the histogram while store calls
// are made, and waitsSpan the longest, and the oldest, a window may be
// to count.
const (
	waitsEvery = 25 * time.Millisecond
	waitsSpan  = time.Second
)

type schedWaits struct {
	last atomic.Int64 // unix nanoseconds of the last read

	mu      sync.Mutex
	sample  []metrics.Sample
	prev    []uint64  // the histogram's counts at the last read
	windows [2]window // the deltas of the last two reads, newest first
}

// window is the scheduling latencies seen between two reads: how many,
// and how many of them at or over each bucket's lower bound (cumulated
// from the top).
type window struct {
	from, at time.Time
	counts   []uint64
	total    uint64
}

// tick reads the histogram if the last read is waitsEvery old: on the
// path of every store call, one atomic load when it is not.
func (w *schedWaits) tick(now time.Time) {
	if last := w.last.Load(); now.UnixNano()-last < int64(waitsEvery) || !w.last.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	w.mu.Lock()
	w.read(now)
	w.mu.Unlock()
}

// read adds the latencies since the last read as the newest window;
// w.mu is held.
func (w *schedWaits) read(now time.Time) {
	if w.sample == nil {
		w.sample = []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	}
	metrics.Read(w.sample)
	if w.sample[0].Value.Kind() != metrics.KindFloat64Histogram {
		return
	}
	h := w.sample[0].Value.Float64Histogram()
	old := w.windows[1].counts[:0]
	d := window{from: w.windows[0].at, at: now, counts: append(old, h.Counts...)}
	if len(w.prev) == len(h.Counts) {
		for i := range d.counts {
			d.counts[i] -= w.prev[i]
		}
	} else {
		clear(d.counts) // the first read: no window yet
	}
	for i := len(d.counts) - 2; i >= 0; i-- {
		d.counts[i] += d.counts[i+1] // at or over bucket i
	}
	if len(d.counts) > 0 {
		d.total = d.counts[0]
	}
	w.prev = append(w.prev[:0], h.Counts...)
	w.windows[1], w.windows[0] = w.windows[0], d
	waitsBuckets = h.Buckets
}

// waitsBuckets are the bucket boundaries of the histogram, in seconds.
var waitsBuckets []float64

// busy reports whether, over the last windows (reading a fresh one
// first), at least a tenth of the goroutines that ran had waited limit or
// more to run, two at least.
func (w *schedWaits) busy(now time.Time, limit time.Duration) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if now.Sub(w.windows[0].at) > waitsEvery/5 {
		w.last.Store(now.UnixNano())
		w.read(now)
	}
	var over, total uint64
	for _, win := range w.windows {
		if now.Sub(win.at) > waitsSpan || win.at.Sub(win.from) > waitsSpan {
			continue // stale, or reaching too far back
		}
		total += win.total
		for i := range win.counts {
			if i < len(waitsBuckets) && waitsBuckets[i] >= limit.Seconds() {
				over += win.counts[i]
				break
			}
		}
	}
	return over >= 2 && over*10 >= total
}

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
