package core

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestCallCtxTimesOut: in a responsive process a call's context is done
// at its timeout, not later, and reports DeadlineExceeded; its Deadline
// is the latest it could be, maxStarved later. A context reused for
// another call starts afresh.
func TestCallCtxTimesOut(t *testing.T) {
	const timeout = 20 * time.Millisecond
	for use := range 3 {
		start := time.Now()
		c := newCallCtx(context.Background(), start, timeout)
		if d, _ := c.Deadline(); !d.Equal(start.Add(timeout + maxStarved)) {
			t.Errorf("use %d: Deadline() = %v after start, want %v", use, d.Sub(start), timeout+maxStarved)
		}
		if err := c.Err(); err != nil {
			t.Fatalf("use %d: Err() = %v before the timeout", use, err)
		}
		select {
		case <-c.Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("use %d: Done not closed 5 s after a %v timeout", use, timeout)
		}
		if took := time.Since(start); took < timeout {
			t.Errorf("use %d: Done closed after %v, before the %v timeout", use, took, timeout)
		}
		if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("use %d: Err() = %v after the timeout, want DeadlineExceeded", use, err)
		}
		c.release()
	}
	// The caller's earlier deadline bounds both.
	parent, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	c := newCallCtx(parent, time.Now(), time.Hour)
	defer c.release()
	pd, _ := parent.Deadline()
	if d, _ := c.Deadline(); !d.Equal(pd) {
		t.Errorf("Deadline() = %v, want the caller's %v", d, pd)
	}
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed 5 s after the caller's 1 ms deadline")
	}
}

// reset forgets every read, under the lock and the atomic the store
// calls of other tests' limiters (a fallback's watch, firing late) may
// be reading through.
func (w *schedWaits) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last.Store(0)
	w.sample, w.prev, w.windows = nil, nil, [2]window{}
}

// TestStarvationSeen: a goroutine that yields in a process whose CPU is
// saturated waits behind every runnable goroutine: starvation reports
// that wait, and reports next to nothing in an idle process.
func TestStarvationSeen(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	const limit = 5 * time.Millisecond
	waits.reset() // what earlier tests saw does not count
	idle := starvation(0, limit)
	time.Sleep(2 * probeFresh)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for !stop.Load() {
			}
		})
	}
	// Every spinner running, for a few reads of the latencies (store
	// calls tick them).
	for range 10 {
		time.Sleep(10 * time.Millisecond)
		waits.tick(time.Now())
	}
	var busy schedState
	for range 5 {
		m := starvation(0, limit)
		busy.run, busy.busy = max(busy.run, m.run), busy.busy || m.busy
		time.Sleep(2 * probeFresh)
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("idle: %+v; with 8 spinners on 2 Ps: %+v", idle, busy)
	if busy.run < limit || !busy.busy {
		t.Errorf("starvation with 8 spinners on 2 Ps = %+v, want goroutines waiting long to run and a yield of at least %v", busy, limit)
	}
	if idle.busy || idle.run >= limit {
		t.Errorf("starvation in an idle process = %+v, want quick and not busy", idle)
	}
	if m := starvation(2*limit, limit); m != (schedState{late: 2 * limit}) {
		t.Errorf("starvation(late %v) = %+v, want the lateness alone", 2*limit, m)
	}
}

// TestJudge: how long a call waits on, by how late its timeout was
// noticed and how busy the scheduler was, and the memory of a busy one.
func TestJudge(t *testing.T) {
	const timeout = 20 * time.Millisecond // limit 2.5 ms
	ms := time.Millisecond
	now := time.Now()
	var s starvedSince
	for _, tc := range []struct {
		name string
		m    schedState
		at   time.Time
		want time.Duration
	}{
		{"responsive", schedState{late: 100 * time.Microsecond, run: 50 * time.Microsecond}, now, 0},
		{"noticed late", schedState{late: 4 * ms}, now, 8 * ms},
		{"slow to run", schedState{run: 5 * ms}, now, 20 * ms},
		{"quick but busy lately", schedState{run: 10 * time.Microsecond}, now.Add(50 * ms), 20 * ms},
		{"quick, busy long ago", schedState{run: 10 * time.Microsecond}, now.Add(150 * ms), 0},
		{"every P busy", schedState{run: time.Millisecond, busy: true}, now.Add(300 * ms), 12 * ms},
	} {
		if got := s.judge(tc.m, tc.at, timeout); got != tc.want {
			t.Errorf("%s: judge(%+v) = %v, want %v", tc.name, tc.m, got, tc.want)
		}
	}
}

// TestCallCtxAfterRelease: Go's context machinery may use a call's
// context after the call returned (context.WithDeadline on a parent it
// does not know starts a goroutine that asks for its Done, then its Err
// and values): a released context is done, canceled, has no values and
// arms no timer, and a timer of an earlier use that fires does nothing.
func TestCallCtxAfterRelease(t *testing.T) {
	const timeout = 5 * time.Millisecond
	c := newCallCtx(context.Background(), time.Now(), timeout)
	c.Done() // armed
	child, cancel := context.WithDeadline(c, time.Now().Add(time.Hour))
	cancel()
	c.release() // before its timer fires, or the goroutine runs
	select {
	case <-c.Done():
	default:
		t.Fatal("Done of a released context is not closed")
	}
	if err := c.Err(); !errors.Is(err, context.Canceled) {
		t.Errorf("Err of a released context = %v, want Canceled", err)
	}
	if v := c.Value("k"); v != nil {
		t.Errorf("Value of a released context = %v, want nil", v)
	}
	if child.Err() == nil {
		t.Error("the child's cancel did not end it")
	}
	time.Sleep(4 * timeout) // the first use's timer fires on a released context
	if c.armed || c.expired {
		t.Errorf("a released context armed %v, expired %v: want neither", c.armed, c.expired)
	}
}
