package core

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// rcall is one store operation on its way to Redis and back. Calls are
// pooled; a call whose caller gave up (its context ended first) is never
// returned to the pool, since a flight may still write to it.
type rcall struct {
	op    byte   // opPeek, opTake, opRefund
	key   string // the Redis key
	slot  int    // the key's cluster slot; 0 on a single node
	algo  Algorithm
	n     int64
	cap   int64 // SlidingLog: the most entries the key keeps
	now   int64 // client time in µs; 0: the server's
	at    int64 // refund: the time of the take
	rules []Rule
	bw    []int64   // SlidingBuckets: bucket width per rule, µs
	lease leaseArgs // leases: at is the lease's first seq
	more  bool      // a lockout or calendar rules (see redis.lua)
	lock  Lockout   // the policy's lockout
	cal   int64     // calendar rules' periods are found around this time, µs

	// The answer.
	allowed bool
	when    int64 // the time of the decision (of the units, for a take)
	states  states
	err     error

	done     chan struct{} // receives once when the answer is in
	deadline time.Time     // the latest the caller waits; zero: no bound
	gaveUp   atomic.Bool   // the caller stopped waiting: the call is not sent
	replied  atomic.Bool   // Redis's reply is in: the answer is being decoded

	// The memory of the script call this call leads (the first call of
	// its flight or group), kept from one use to the next so that a
	// decision allocates none of it.
	args []any
	blob blob
	one  [1]batchCmd // its command, for a flight of one
}

var rcallPool = sync.Pool{New: func() any {
	return &rcall{done: make(chan struct{}, 1)}
}}

func getCall() *rcall { return rcallPool.Get().(*rcall) }

// maxKeptBlob bounds the packed arguments a pooled call keeps.
const maxKeptBlob = 4096

// putCall returns a call the caller has received the answer of.
func putCall(c *rcall) {
	done, args, b := c.done, c.args, c.blob.b
	clear(args)
	if cap(b) > maxKeptBlob {
		b = nil
	}
	*c = rcall{done: done, args: args[:0], blob: blob{b[:0]}}
	rcallPool.Put(c)
}

// blob is the packed arguments of a script call. go-redis writes it
// through MarshalBinary, so that a pointer to a pooled one is an argument
// that costs no allocation.
type blob struct{ b []byte }

// MarshalBinary returns the packed arguments.
func (b *blob) MarshalBinary() ([]byte, error) { return b.b, nil }

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

// Store operations.
const (
	opPeek   = 0
	opTake   = 1
	opRefund = 2

	// opMore is added to the op of a decision that carries a lockout or
	// calendar rules.
	opMore = 8
)

// batcher sends the calls of a RedisStore: callers queue their calls,
// and up to maxFlushers flusher goroutines each take what has queued, up
// to maxBatch calls, into one round trip: one script call per Cluster
// slot deciding all of them. Flushers end after a second without work.
//
// A caller waits for its answer on its own context, not on the flight's
// I/O: the reply is read by a flusher whatever the caller's timeout, so
// a reply that came while the process was too busy to read it is not
// lost to a socket deadline, and a caller whose context ends while its
// answer is there takes the answer.
type batcher struct {
	s           *RedisStore
	maxBatch    int
	maxFlushers int

	mu       sync.Mutex
	queue    []*rcall
	flushers int // flusher goroutines alive
	waiting  int // flushers waiting for work
	work     chan struct{}
}

const flusherIdle = time.Second

// maxQueue bounds the calls waiting for a flight: past it a call fails at
// once (the failure policy decides), rather than wait behind a stuck Redis.
const maxQueue = 10000

var errBusy = errors.New("too many calls waiting for Redis")

func newBatcher(s *RedisStore, maxBatch int) *batcher {
	b := &batcher{s: s, maxBatch: maxBatch, maxFlushers: 2}
	b.work = make(chan struct{}, b.maxFlushers)
	return b
}

// do sends c and waits for its answer or the end of ctx. If the answer
// did not come, it returns why: c then belongs to the flight that
// carries it and must not be reused.
func (b *batcher) do(ctx context.Context, c *rcall) error {
	c.deadline, _ = ctx.Deadline()
	b.mu.Lock()
	if len(b.queue) >= maxQueue {
		b.mu.Unlock()
		c.err = errBusy
		return nil
	}
	b.queue = append(b.queue, c)
	b.kick()
	b.mu.Unlock()
	return c.await(ctx)
}

// await waits for c's answer or the end of ctx. An answer that is there
// when ctx ends is taken, not dropped: one decoded already, or one whose
// reply Redis has sent and the flight has read.
func (c *rcall) await(ctx context.Context) error {
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		if c.replied.Load() {
			<-c.done // Redis answered: the answer is on its way
			return nil
		}
		select {
		case <-c.done:
			return nil
		default:
		}
		c.gaveUp.Store(true)
		return ctx.Err()
	}
}

// kick makes sure a flusher will take the queue; b.mu is held.
func (b *batcher) kick() {
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
func (b *batcher) flush() {
	idle := time.NewTimer(flusherIdle)
	defer idle.Stop()
	var batch []*rcall // reused from one batch to the next
	dc := new(deadlineCtx)
	for {
		b.mu.Lock()
		if n := len(b.queue); n > 0 {
			n = min(n, b.maxBatch)
			batch = append(batch[:0], b.queue[:n]...)
			rest := copy(b.queue, b.queue[n:])
			clear(b.queue[rest:])
			b.queue = b.queue[:rest]
			b.mu.Unlock()
			b.send(batch, dc)
			clear(batch) // the calls go back to their callers
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
// callers' deadlines (each caller still waits only as its own context
// says), and hands every caller its answer. dc is the flusher's, reused
// from flight to flight.
func (b *batcher) send(batch []*rcall, dc *deadlineCtx) {
	var deadline time.Time
	for _, c := range batch {
		if c.deadline.IsZero() {
			deadline = time.Time{}
			break
		}
		if c.deadline.After(deadline) {
			deadline = c.deadline
		}
	}
	ctx := context.Background()
	if b.s.honorsCtx {
		// A client that ignores ctx keeps to its own timeouts; the
		// callers wait by their own contexts either way.
		ctx = withDeadline(ctx, deadline, dc)
	}
	// Calls whose callers have given up are not sent.
	now := time.Now()
	live := batch[:0]
	for _, c := range batch {
		if c.gaveUp.Load() || !c.deadline.IsZero() && !now.Before(c.deadline) {
			c.err = context.DeadlineExceeded
			c.done <- struct{}{}
			continue
		}
		live = append(live, c)
	}
	if len(live) > 0 {
		b.s.flight(ctx, live)
	}
	dc.disarm()
	for _, c := range live {
		c.done <- struct{}{}
	}
}
