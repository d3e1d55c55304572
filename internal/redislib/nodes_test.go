package redislib

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeCluster is a slot map a test changes, and the flights its nodes'
// batchers send.
type fakeCluster struct {
	mu     sync.Mutex
	ranges []SlotRange
	err    error
	loads  atomic.Int64
}

func (f *fakeCluster) load(context.Context) ([]SlotRange, error) {
	f.loads.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]SlotRange(nil), f.ranges...), f.err
}

func (f *fakeCluster) set(ranges []SlotRange, err error) {
	f.mu.Lock()
	f.ranges, f.err = ranges, err
	f.mu.Unlock()
}

// owner returns the address the fake map names for slot.
func (f *fakeCluster) owner(slot int) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.ranges {
		if slot >= r.Start && slot <= r.End {
			return r.Addr
		}
	}
	return ""
}

var twoNodes = []SlotRange{{0, 8191, "10.0.0.1:7000"}, {8192, 16383, "10.0.0.2:7000"}}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

// call returns a call of slot, answered by a flight.
func call(slot int) *Call {
	c := Get()
	c.Slot = slot
	return c
}

// TestNodesRoute: until the slot map is loaded, calls go through the
// shared batcher and partitions are groups of slots; once it is, every
// flight carries calls of one master only, and partitions are masters'
// addresses, by the slot.
func TestNodesRoute(t *testing.T) {
	f := &fakeCluster{ranges: twoNodes}
	var mixed, flights atomic.Int64
	flight := func(_ context.Context, calls []*Call) {
		flights.Add(1)
		for _, c := range calls[1:] {
			if f.owner(c.Slot) != f.owner(calls[0].Slot) {
				mixed.Add(1)
			}
		}
	}
	n := NewNodes(f.load, func() *Batcher { return NewBatcher(flight, 64, true) })
	if got := n.Partition(8192); got != "slots-32" {
		t.Errorf("Partition(8192) before the map is known = %q, want slots-32", got)
	}
	waitFor(t, "the map is loaded", func() bool { _, ok := n.Addr(0); return ok })
	for slot, want := range map[int]string{0: "10.0.0.1:7000", 8191: "10.0.0.1:7000", 8192: "10.0.0.2:7000", 16383: "10.0.0.2:7000"} {
		if got := n.Partition(slot); got != want {
			t.Errorf("Partition(%d) = %q, want %q", slot, got, want)
		}
	}
	if n.batcher(100) == n.batcher(9000) || n.batcher(100) != n.batcher(200) || n.batcher(100) == n.shared {
		t.Error("batcher(100), batcher(200), batcher(9000): want one batcher per master, not the shared one")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for i := range 200 {
				c := call((g*7919 + i*104729) % SlotCount)
				if err := n.Do(ctx, c); err != nil {
					t.Errorf("Do: %v", err)
					return
				}
				Put(c)
			}
		})
	}
	wg.Wait()
	if m := mixed.Load(); m > 0 {
		t.Errorf("%d calls in flights of another master's calls, want 0 (%d flights)", m, flights.Load())
	}
}

// TestNodesStuckMaster: a master whose flights do not return holds up its
// own calls, which time out, and no others: calls of the other master are
// answered at once, however many wait for the stuck one (up to its own
// bounded queue, past which its calls fail with ErrBusy at once).
func TestNodesStuckMaster(t *testing.T) {
	f := &fakeCluster{ranges: twoNodes}
	release := make(chan struct{})
	flight := func(_ context.Context, calls []*Call) {
		if f.owner(calls[0].Slot) == "10.0.0.1:7000" {
			<-release // a paused master, and a client that keeps to its own read timeout
		}
		for _, c := range calls {
			c.Allowed = true
		}
	}
	n := NewNodes(f.load, func() *Batcher { return NewBatcher(flight, 64, false) })
	waitFor(t, "the map is loaded", func() bool { _, ok := n.Addr(0); return ok })
	defer close(release)

	var stuck sync.WaitGroup
	for range 8 {
		stuck.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			if err := n.Do(ctx, call(10)); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Do on the stuck master = %v, want DeadlineExceeded", err)
			}
		})
	}
	for i := range 100 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c := call(9000 + i)
		start := time.Now()
		err := n.Do(ctx, c)
		cancel()
		if err != nil || !c.Allowed {
			t.Fatalf("Do on the other master while one is stuck = %v, Allowed %v; want answered", err, c.Allowed)
		}
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Errorf("a call of the healthy master took %v", d)
		}
		Put(c)
	}
	stuck.Wait()
}

// TestNodesRefresh: the map is loaded again when reported stale (not
// sooner than slotsRetry), a failed load keeps the map it had, and a
// slot that changed hands goes to its new master; the batcher of a
// master gone is dropped.
func TestNodesRefresh(t *testing.T) {
	f := &fakeCluster{ranges: twoNodes}
	n := NewNodes(f.load, func() *Batcher { return NewBatcher(func(context.Context, []*Call) {}, 64, true) })
	waitFor(t, "the map is loaded", func() bool { _, ok := n.Addr(0); return ok })
	old := n.batcher(9000)

	f.set(nil, errors.New("node down"))
	n.Stale()
	loads := f.loads.Load()
	waitFor(t, "a load after Stale", func() bool { n.Addr(0); return f.loads.Load() > loads && !n.loading.Load() })
	if got := n.Partition(9000); got != "10.0.0.2:7000" {
		t.Errorf("Partition(9000) after a failed load = %q, want the last map's 10.0.0.2:7000", got)
	}

	f.set([]SlotRange{{0, 16383, "10.0.0.1:7000"}}, nil)
	start := time.Now()
	waitFor(t, "slot 9000 on its new master", func() bool { a, _ := n.Addr(9000); return a == "10.0.0.1:7000" })
	if d := time.Since(start); d < slotsRetry/2 {
		t.Errorf("loaded again %v after the last load, want no sooner than about %v", d, slotsRetry)
	}
	if n.batcher(9000) == old || n.batcher(9000) != n.batcher(0) {
		t.Error("slot 9000 still goes to its old master's batcher")
	}
	n.mu.Lock()
	_, kept := n.batchers["10.0.0.2:7000"]
	n.mu.Unlock()
	if kept {
		t.Error("the batcher of a master gone is kept")
	}
}

// TestSlotTableRejects: a map with a bad range, or none, is not used.
func TestSlotTableRejects(t *testing.T) {
	for _, ranges := range [][]SlotRange{nil, {{0, 16384, "a:1"}}, {{5, 4, "a:1"}}, {{0, 10, ""}}, {{-1, 10, "a:1"}}} {
		if _, err := newSlotTable(ranges); !errors.Is(err, errBadSlots) {
			t.Errorf("newSlotTable(%v) = %v, want errBadSlots", ranges, err)
		}
	}
}

// TestMoved: the errors of a slot map that changed or is changing hands.
func TestMoved(t *testing.T) {
	for _, m := range []string{"MOVED 3999 127.0.0.1:6381", "ASK 3999 127.0.0.1:6381", "CLUSTERDOWN The cluster is down", "READONLY You can't write"} {
		if !Moved(m) {
			t.Errorf("Moved(%q) = false, want true", m)
		}
	}
	if m := "TRYAGAIN Multiple keys request during rehashing of slot"; Moved(m) {
		t.Errorf("Moved(%q) = true, want false", m)
	}
}

// TestRetryOfTryAgain: TRYAGAIN splits a call of several keys, and pauses
// a call of one (it comes only of several keys; a pause is the old
// remedy).
func TestRetryOfTryAgain(t *testing.T) {
	const msg = "TRYAGAIN Multiple keys request during rehashing of slot"
	if r := RetryOf(msg, false, 2); r != RetrySplit {
		t.Errorf("RetryOf(TRYAGAIN, 2 keys) = %v, want RetrySplit", r)
	}
	if r := RetryOf(msg, true, 16); r != RetrySplit {
		t.Errorf("RetryOf(TRYAGAIN, script, 16 keys) = %v, want RetrySplit", r)
	}
	if r := RetryOf(msg, false, 1); r != RetryPause {
		t.Errorf("RetryOf(TRYAGAIN, 1 key) = %v, want RetryPause", r)
	}
}
