package redislib

import (
	"context"
	"sync"
	"time"
)

// Batcher sends the calls of a store: callers queue their calls, and up
// to maxFlushers flusher goroutines each take what has queued, up to
// maxBatch calls, into one flight: one round trip, one script call per
// group (see Group) deciding all of them. Flushers end after a second
// without work.
//
// A caller waits for its answer on its own context, not on the flight's
// I/O: the reply is read by a flusher whatever the caller's timeout, so a
// reply that came while the process was too busy to read it is not lost
// to a socket deadline, and a caller whose context ends while its answer
// is there takes the answer.
//
// A lone caller (nothing queued, no flight under way) runs its own
// flight instead, on its own goroutine, where the batcher has an inline
// runner (SetInline): it saves the hand-off to a flusher and back, two
// goroutine wake-ups. Callers that come meanwhile queue for the flushers
// as before.
type Batcher struct {
	flight      func(ctx context.Context, calls []*Call)
	inline      func(ctx context.Context, c *Call) (bool, error) // see SetInline; nil: none
	deadlines   bool                                             // the flight's I/O is bounded by its callers' deadlines
	maxBatch    int
	maxFlushers int

	mu       sync.Mutex
	queue    []*Call
	flushers int // flusher goroutines alive
	waiting  int // flushers waiting for work
	sending  int // flights under way, a lone caller's included
	work     chan struct{}
}

const flusherIdle = time.Second

// maxQueue bounds the calls waiting for a flight: past it a call fails at
// once (the failure policy decides), rather than wait behind a stuck Redis.
const maxQueue = 10000

// NewBatcher returns a batcher whose flights run flight, each with at
// most maxBatch calls. With deadlines set, a flight's context carries the
// latest deadline of its callers (for a client that bounds its I/O by
// the context); else it has none (a client that keeps to its own
// timeouts).
func NewBatcher(flight func(ctx context.Context, calls []*Call), maxBatch int, deadlines bool) *Batcher {
	b := &Batcher{flight: flight, deadlines: deadlines, maxBatch: maxBatch, maxFlushers: 2}
	b.work = make(chan struct{}, b.maxFlushers)
	return b
}

// SetInline gives the batcher a runner for a lone caller's flight: when
// nothing is queued and no flight is under way, Do calls run(ctx, c) on
// the caller's goroutine instead of handing c to a flusher. run sends c
// in a flight of its own and returns once c has its answer, or ctx has
// ended without one (then it returns ctx's error, and c is not reused),
// with ran set; it returns ran false without sending anything when it
// cannot bound its wait by ctx (c then goes to a flusher). run must
// keep Await's promise: an answer that Redis has sent when ctx ends is
// read and taken. Set it before the batcher is used.
func (b *Batcher) SetInline(run func(ctx context.Context, c *Call) (ran bool, err error)) {
	b.inline = run
}

// Do sends c and waits for its answer or the end of ctx. If the answer
// did not come, it returns why: c then belongs to the flight that
// carries it and must not be reused.
func (b *Batcher) Do(ctx context.Context, c *Call) error {
	c.Deadline, _ = ctx.Deadline()
	b.mu.Lock()
	if b.inline != nil && b.sending == 0 && len(b.queue) == 0 {
		// A lone caller: its own flight, no hand-off.
		b.sending++
		b.mu.Unlock()
		ran, err := b.inline(ctx, c)
		b.mu.Lock()
		b.sending--
		if ran {
			b.mu.Unlock()
			return err
		}
	}
	if len(b.queue) >= maxQueue {
		b.mu.Unlock()
		c.Err = ErrBusy
		return nil
	}
	b.queue = append(b.queue, c)
	b.kick()
	b.mu.Unlock()
	return c.Await(ctx)
}

// Await waits for c's answer or the end of ctx. An answer that is there
// when ctx ends is taken, not dropped: one decoded already, or one whose
// reply Redis has sent and the flight has read.
func (c *Call) Await(ctx context.Context) error {
	select {
	case <-c.Done:
		return nil
	case <-ctx.Done():
		if c.replied.Load() {
			<-c.Done // Redis answered: the answer is on its way
			return nil
		}
		select {
		case <-c.Done:
			return nil
		default:
		}
		c.gaveUp.Store(true)
		return ctx.Err()
	}
}

// kick makes sure a flusher will take the queue; b.mu is held.
func (b *Batcher) kick() {
	switch {
	case len(b.queue) == 0:
	case b.waiting > 0:
		select {
		case b.work <- struct{}{}:
		default: // enough wake-ups pending
		}
	case b.flushers < b.maxFlushers:
		b.flushers++
		go b.flush()
	}
}

// flush takes batches off the queue until it has been idle for a while.
func (b *Batcher) flush() {
	idle := time.NewTimer(flusherIdle)
	defer idle.Stop()
	var batch []*Call // reused from one batch to the next
	dc := new(deadlineCtx)
	sent := false // a flight of this flusher ended since it last held b.mu
	for {
		b.mu.Lock()
		if sent {
			b.sending--
			sent = false
		}
		if n := len(b.queue); n > 0 {
			n = min(n, b.maxBatch)
			batch = append(batch[:0], b.queue[:n]...)
			rest := copy(b.queue, b.queue[n:])
			clear(b.queue[rest:])
			b.queue = b.queue[:rest]
			b.sending++
			b.mu.Unlock()
			b.send(batch, dc)
			clear(batch) // the calls go back to their callers
			sent = true
			continue
		}
		b.waiting++
		b.mu.Unlock()
		idle.Reset(flusherIdle)
		timedOut := false
		select {
		case <-b.work:
		case <-idle.C:
			timedOut = true
		}
		b.mu.Lock()
		b.waiting--
		if timedOut && len(b.queue) == 0 {
			b.flushers--
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
	}
}

// send runs one flight for batch, its I/O bounded by the latest of its
// callers' deadlines when the batcher has deadlines (each caller still
// waits only as its own context says), and hands every caller its
// answer. dc is the flusher's, reused from flight to flight.
func (b *Batcher) send(batch []*Call, dc *deadlineCtx) {
	var deadline time.Time
	for _, c := range batch {
		if c.Deadline.IsZero() {
			deadline = time.Time{}
			break
		}
		if c.Deadline.After(deadline) {
			deadline = c.Deadline
		}
	}
	ctx := context.Background()
	if b.deadlines {
		ctx = withDeadline(ctx, flusherDeadline(deadline), dc)
	}
	// Calls whose callers have given up are not sent.
	now := time.Now()
	live := batch[:0]
	for _, c := range batch {
		if c.gaveUp.Load() || !c.Deadline.IsZero() && !now.Before(c.Deadline) {
			c.Err = context.DeadlineExceeded
			c.Done <- struct{}{}
			continue
		}
		live = append(live, c)
	}
	if len(live) > 0 {
		b.flight(ctx, live)
	}
	dc.disarm()
	for _, c := range live {
		c.Done <- struct{}{}
	}
}

// A flight's deadline names the read of its reply for a driver that
// reads a lone caller's reply its own way (Batcher.SetInline): a lone
// caller's flight has an odd deadline (in nanoseconds of the wall
// clock), a flusher's an even one, each at most a nanosecond before its
// callers' deadline, so that a flusher's read is never taken for a lone
// caller's that shares its deadline (their request's).

// InlineDeadline returns the deadline of a lone caller's flight, for a
// caller's deadline d: d or a nanosecond before, odd.
func InlineDeadline(d time.Time) time.Time {
	if d.UnixNano()&1 == 0 {
		return d.Add(-1)
	}
	return d
}

// flusherDeadline returns the deadline of a flusher's flight, for the
// latest deadline d of its callers (zero: none): d or a nanosecond
// before, even.
func flusherDeadline(d time.Time) time.Time {
	if d.IsZero() || d.UnixNano()&1 == 0 {
		return d
	}
	return d.Add(-1)
}

// deadlineCtx is a context with an earlier deadline than its parent,
// reused from flight to flight so that a flight allocates none of what
// context.WithDeadline costs (a timer, a channel, four allocations). The
// client's I/O deadlines come from Deadline; Done closes at the deadline
// once asked for (go-redis asks when it waits for a free connection) by a
// timer and a channel that are kept while they do not fire. Done does not
// follow the parent's cancellation: the deadline, never later than the
// limiter's timeout, bounds every wait. Err does report the parent's
// end. A deadlineCtx is armed by withDeadline and must be disarmed before
// it is reused.
type deadlineCtx struct {
	context.Context
	deadline time.Time

	mu    sync.Mutex
	ch    chan struct{} // closed at the deadline while armed: then closedChan
	timer *time.Timer   // runs expire
	armed bool          // the timer runs for this use
}

// closedChan is the Done of a deadlineCtx whose deadline has passed, for
// every ask until the use ends.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Deadline returns the deadline.
func (c *deadlineCtx) Deadline() (time.Time, bool) { return c.deadline, true }

// Done returns a channel closed at the deadline.
func (c *deadlineCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.armed {
		if c.ch == nil || c.ch == closedChan {
			c.ch = make(chan struct{})
		}
		d := time.Until(c.deadline)
		if c.timer == nil {
			c.timer = time.AfterFunc(d, c.expire)
		} else {
			c.timer.Reset(d)
		}
		c.armed = true
	}
	return c.ch
}

// expire closes the channel of an armed use whose deadline has passed; a
// late run of the timer of an earlier use finds the deadline ahead.
func (c *deadlineCtx) expire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.armed && c.ch != closedChan && !time.Now().Before(c.deadline) {
		close(c.ch)
		c.ch = closedChan
	}
}

// disarm ends a use: the timer stops, and a channel that did not close
// is kept for the next use (a closed one is replaced when it is asked
// for).
func (c *deadlineCtx) disarm() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.armed {
		c.timer.Stop()
		c.armed = false
	}
	c.Context = nil
}

// Err returns the parent's error, or DeadlineExceeded once the deadline
// has passed.
func (c *deadlineCtx) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// withDeadline returns ctx bounded by deadline (zero: none) in dc, or ctx
// itself when its own deadline comes first. Disarm dc after the use.
func withDeadline(ctx context.Context, deadline time.Time, dc *deadlineCtx) context.Context {
	if d, ok := ctx.Deadline(); deadline.IsZero() || ok && !deadline.Before(d) {
		return ctx
	}
	dc.mu.Lock()
	dc.Context, dc.deadline = ctx, deadline
	dc.mu.Unlock()
	return dc
}

// Bounded runs f on a goroutine of its own and returns by the end of ctx,
// even when the client ignores ctx: the caller waits on ctx, f's I/O is
// bounded by ctx's deadline alone, so that a reply that came while the
// process was too busy to read it is not lost to the caller's timeout. An
// answer there when ctx ends is taken. A call abandoned when ctx ends
// finishes in the background within that deadline (or the client's own
// read timeout); the Limiter's circuit breaker keeps such calls few while
// Redis is unreachable. f's context has ctx's deadline and nothing else:
// a store's context must not be used once the store's method returned.
func Bounded[T any](ctx context.Context, f func(ctx context.Context) (T, error)) (T, error) {
	if ctx.Done() == nil {
		return f(ctx)
	}
	wctx, cancel := context.Background(), context.CancelFunc(func() {})
	if dl, ok := ctx.Deadline(); ok {
		wctx, cancel = context.WithDeadline(wctx, dl)
	}
	type reply struct {
		v   T
		err error
	}
	ch := make(chan reply, 1)
	go func() {
		defer cancel()
		v, err := f(wctx)
		ch <- reply{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		select {
		case r := <-ch:
			return r.v, r.err
		default:
		}
		var zero T
		return zero, ctx.Err()
	}
}
