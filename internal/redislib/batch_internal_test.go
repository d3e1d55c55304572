package redislib

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestDeadlineCtxDone: Done closes at the deadline and stays closed for
// every later ask in the same use (go-redis asks once before waiting for
// a connection and again while it waits); a reused context's channel is
// open again until its new deadline.
func TestDeadlineCtxDone(t *testing.T) {
	dc := new(deadlineCtx)
	for use := range 3 {
		ctx := withDeadline(context.Background(), time.Now().Add(20*time.Millisecond), dc)
		if ctx != dc {
			t.Fatalf("use %d: withDeadline did not use the deadlineCtx", use)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("use %d: Done closed before the deadline", use)
		default:
		}
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
			t.Fatalf("use %d: Done not closed 2 s after a 20 ms deadline", use)
		}
		if err := ctx.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("use %d: Err() = %v after the deadline, want DeadlineExceeded", use, err)
		}
		for ask := range 3 {
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
				t.Fatalf("use %d: Done asked again (%d) after the deadline is not closed", use, ask+1)
			}
		}
		dc.disarm()
	}
	// A use that ends before its deadline keeps its channel open for the
	// next one.
	ctx := withDeadline(context.Background(), time.Now().Add(time.Hour), dc)
	ch := ctx.Done()
	dc.disarm()
	ctx = withDeadline(context.Background(), time.Now().Add(time.Hour), dc)
	if got := ctx.Done(); got != ch {
		t.Error("a use that ended before its deadline did not keep its channel")
	}
	select {
	case <-ctx.Done():
		t.Error("Done closed an hour before the deadline")
	default:
	}
	dc.disarm()
}

// TestAwaitTakesAnswerThere: an answer that is there when the caller's
// context ends is taken, not dropped for a timeout, however the select
// picks among its ready cases.
func TestAwaitTakesAnswerThere(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 1000 {
		c := &Call{Done: make(chan struct{}, 1)}
		c.Done <- struct{}{}
		if err := c.Await(ctx); err != nil {
			t.Fatalf("try %d: await with the answer there and the context done = %v, want nil", i, err)
		}
	}
	c := &Call{Done: make(chan struct{}, 1)}
	if err := c.Await(ctx); !errors.Is(err, context.Canceled) || !c.gaveUp.Load() {
		t.Fatalf("await without an answer = %v (gave up: %v), want Canceled and the call given up", err, c.gaveUp.Load())
	}
}

// TestBatcherLoneCallerInline: a lone caller runs its own flight through
// the inline runner; a caller that comes while that flight is under way
// goes to a flusher; a runner that declines hands its call to a
// flusher; and the inline runner's error is the caller's.
func TestBatcherLoneCallerInline(t *testing.T) {
	var flights, inlines atomic.Int64
	b := NewBatcher(func(_ context.Context, calls []*Call) {
		flights.Add(1)
		for _, c := range calls {
			c.Allowed = true
		}
	}, 64, true)
	release := make(chan struct{})
	entered := make(chan struct{})
	decline := false
	b.SetInline(func(_ context.Context, c *Call) (bool, error) {
		if decline {
			return false, nil
		}
		if inlines.Add(1) == 1 {
			close(entered)
			<-release // the first lone caller's flight is under way
		}
		c.Allowed = true
		return true, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	first := make(chan error, 1)
	go func() { first <- b.Do(ctx, &Call{Done: make(chan struct{}, 1)}) }()
	<-entered
	// Meanwhile, another caller: queued for a flusher.
	c := &Call{Done: make(chan struct{}, 1)}
	if err := b.Do(ctx, c); err != nil || !c.Allowed || flights.Load() != 1 {
		t.Fatalf("a caller during a lone caller's flight: err %v, allowed %v, %d flusher flights; want its answer from one flight", err, c.Allowed, flights.Load())
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("the lone caller: %v", err)
	}
	// Alone again: inline, no flusher flight.
	c = &Call{Done: make(chan struct{}, 1)}
	if err := b.Do(ctx, c); err != nil || !c.Allowed || inlines.Load() != 2 || flights.Load() != 1 {
		t.Fatalf("a lone caller: err %v, allowed %v, %d inline and %d flusher flights; want its answer inline", err, c.Allowed, inlines.Load(), flights.Load())
	}
	// A runner that declines: a flusher takes the call.
	decline = true
	c = &Call{Done: make(chan struct{}, 1)}
	if err := b.Do(ctx, c); err != nil || !c.Allowed || flights.Load() != 2 {
		t.Fatalf("a declined lone caller: err %v, allowed %v, %d flusher flights; want its answer from a flusher", err, c.Allowed, flights.Load())
	}
}
