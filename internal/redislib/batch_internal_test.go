package redislib

import (
	"context"
	"errors"
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
