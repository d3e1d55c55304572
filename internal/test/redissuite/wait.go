package redissuite

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// testWaitFailClosed: a FailClosed refusal is waited out until the store
// answers again, and fails fast when the limiter will not try the store
// again before the deadline; FailOpen admits at once.
func testWaitFailClosed(t *testing.T, drv Driver) {
	t.Parallel()
	srv := redistest.Start(t)
	var closed atomic.Int64
	obs := core.ObserverFunc(func(_ context.Context, e core.Event) {
		if e.Kind == core.EventDecision && e.Decision.Source == core.SourceClosed {
			closed.Add(1)
		}
	})
	p := core.Policy{Name: "closed", Rules: []core.Rule{{Limit: 5, Window: time.Minute}}}
	// A short store timeout, so that a call to the stopped server fails
	// well before the callers' deadlines whatever the client does to dial.
	l := testkit.Limiter(t, drv.New(t, srv), p, core.WithTimeout(100*time.Millisecond),
		core.WithFailurePolicy(core.FailClosed), core.WithBreaker(1, time.Second), core.WithDenyCache(0), core.WithObserver(obs))
	open := testkit.Limiter(t, drv.New(t, srv), p, core.WithTimeout(100*time.Millisecond), core.WithFailurePolicy(core.FailOpen))
	srv.Stop()

	if d, err := open.Wait(context.Background(), "k"); err != nil || !d.Allowed || d.Source != core.SourceOpen {
		t.Errorf("FailOpen Wait(k) with the store down = %+v, %v; want admitted by SourceOpen", d, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := l.Wait(ctx, "k")
	if !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil || !strings.Contains(err.Error(), "FailClosed") {
		t.Errorf("FailClosed Wait(k) with the store down and 500 ms left = %v (context: %v), want a DeadlineExceeded naming FailClosed before the deadline", err, ctx.Err())
	}

	// The store comes back while a caller waits: it is admitted by the store.
	done := make(chan struct{})
	var d core.Decision
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		d, err = l.Wait(ctx, "k")
	}()
	testkit.WaitUntil(t, "a FailClosed refusal", func() bool { return closed.Load() >= 2 })
	srv.Restart()
	<-done
	if err != nil || !d.Allowed || d.Source != core.SourceStore {
		t.Errorf("FailClosed Wait(k) across the outage = %+v, %v; want admitted by the store", d, err)
	}
	t.Logf("%d FailClosed refusals waited out", closed.Load())
}
