package core

import (
	"context"
	"errors"
	"sync"
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

	// The answer.
	allowed bool
	when    int64 // the time of the decision (of the units, for a take)
	states  states
	err     error

	done     chan struct{} // receives once when the answer is in
	deadline time.Time     // the caller's deadline; zero: none
	timer    *time.Timer   // the caller's wait for deadline; stopped
}

var rcallPool = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &rcall{done: make(chan struct{}, 1), timer: t}
}}

func getCall() *rcall { return rcallPool.Get().(*rcall) }

// putCall returns a call the caller has received the answer of.
func putCall(c *rcall) {
	done, timer := c.done, c.timer
	*c = rcall{done: done, timer: timer}
	rcallPool.Put(c)
}

// Store operations.
const (
	opPeek   = 0
	opTake   = 1
	opRefund = 2
)

// batcher sends the calls of a RedisStore. A call arriving while fewer
// than maxDirect flights are in the air and none waits is sent at once on
// its caller's goroutine: a lone caller pays no hand-off. Others queue,
// and up to maxFlushers flusher goroutines each take what has queued, up
// to maxBatch calls, into one round trip: one script call per Cluster
// slot deciding all of them. Flushers end after a second without work.
type batcher struct {
	s           *RedisStore
	maxBatch    int
	maxDirect   int
	maxFlushers int

	mu       sync.Mutex
	queue    []*rcall
	direct   int // direct flights in the air
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
	b := &batcher{s: s, maxBatch: maxBatch, maxDirect: 1, maxFlushers: 2}
	b.work = make(chan struct{}, b.maxFlushers)
	return b
}

// do sends c and waits for its answer, the end of ctx or deadline (zero:
// none). If the answer did not come, it returns why: c then belongs to
// the flight that carries it and must not be reused.
func (b *batcher) do(ctx context.Context, deadline time.Time, c *rcall) error {
	b.mu.Lock()
	if b.s.honorsCtx && b.direct < b.maxDirect && len(b.queue) == 0 {
		b.direct++
		b.mu.Unlock()
		fctx := ctx
		if d, ok := ctx.Deadline(); !deadline.IsZero() && (!ok || deadline.Before(d)) {
			var cancel context.CancelFunc
			fctx, cancel = context.WithDeadline(ctx, deadline)
			defer cancel()
		}
		b.s.flight(fctx, []*rcall{c})
		b.mu.Lock()
		b.direct--
		b.kick()
		b.mu.Unlock()
		return nil
	}
	if len(b.queue) >= maxQueue {
		b.mu.Unlock()
		c.err = errBusy
		return nil
	}
	c.deadline = deadline
	b.queue = append(b.queue, c)
	b.kick()
	b.mu.Unlock()
	var timeout <-chan time.Time
	if !deadline.IsZero() {
		c.timer.Reset(time.Until(deadline))
		timeout = c.timer.C
	}
	select {
	case <-c.done:
		c.timer.Stop()
		return nil
	case <-ctx.Done():
		c.timer.Stop()
		return ctx.Err()
	case <-timeout:
		return context.DeadlineExceeded
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
	for {
		b.mu.Lock()
		if n := len(b.queue); n > 0 {
			n = min(n, b.maxBatch)
			batch = append(batch[:0], b.queue[:n]...)
			rest := copy(b.queue, b.queue[n:])
			clear(b.queue[rest:])
			b.queue = b.queue[:rest]
			b.mu.Unlock()
			b.send(batch)
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

// send runs one flight for batch, bounded by the latest deadline of its
// callers (each caller still waits only until its own), and hands every
// caller its answer.
func (b *batcher) send(batch []*rcall) {
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
	if !deadline.IsZero() && b.s.honorsCtx {
		// A client that ignores ctx keeps to its own timeouts; the
		// callers wait by their own deadlines either way.
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	// Calls whose callers have given up are not sent.
	now := time.Now()
	live := batch[:0]
	for _, c := range batch {
		if !c.deadline.IsZero() && !now.Before(c.deadline) {
			c.err = context.DeadlineExceeded
			c.done <- struct{}{}
			continue
		}
		live = append(live, c)
	}
	if len(live) > 0 {
		b.s.flight(ctx, live)
	}
	for _, c := range live {
		c.done <- struct{}{}
	}
}
