package redislib

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
)

// TestNodesFailed: a failed connection makes the nodes load the map again
// at once, and the client's (Reload) on the same goroutine before the new
// map is used; loads go on while failures do, one at a time and each with
// its Reload. A load that finds the map unchanged while nothing fails
// does not reload the client.
func TestNodesFailed(t *testing.T) {
	f := &fakeCluster{ranges: twoNodes}
	n := NewNodes(f.load, func() *Batcher { return NewBatcher(func(context.Context, []*Call) {}, 64, true) })
	var (
		mu      sync.Mutex
		reloads int
		seen    []string // the owner of slot 9000 the nodes named while the client reloaded
	)
	n.Reload = func(context.Context) {
		a, _ := n.Addr(9000)
		mu.Lock()
		reloads++
		seen = append(seen, a)
		mu.Unlock()
	}
	reloaded := func() int {
		mu.Lock()
		defer mu.Unlock()
		return reloads
	}
	waitFor(t, "the map is loaded", func() bool { _, ok := n.Addr(0); return ok })
	n.Stale()
	loads := f.loads.Load()
	waitFor(t, "a load after Stale", func() bool { n.Addr(0); return f.loads.Load() > loads && !n.loading.Load() })
	if r := reloaded(); r != 0 {
		t.Errorf("%d client reloads after loads of an unchanged map with no failure, want 0", r)
	}

	// Master 10.0.0.2 dies; its replica 10.0.0.3 takes its slots.
	f.set([]SlotRange{{0, 8191, "10.0.0.1:7000"}, {8192, 16383, "10.0.0.3:7000"}}, nil)
	n.Failed()
	waitFor(t, "slot 9000 on the promoted replica", func() bool { a, _ := n.Addr(9000); return a == "10.0.0.3:7000" })
	mu.Lock()
	if len(seen) == 0 || seen[len(seen)-1] != "10.0.0.2:7000" {
		t.Errorf("the client reloaded while the nodes named %v for slot 9000, want the old master 10.0.0.2:7000 until it has", seen)
	}
	mu.Unlock()

	// Failures go on: so do the loads, each with the client's reload.
	loads = f.loads.Load()
	before := reloaded()
	waitFor(t, "three more loads while a node fails", func() bool {
		n.Failed()
		return f.loads.Load() >= loads+3
	})
	waitFor(t, "the last load to end", func() bool { return !n.loading.Load() })
	if got, want := reloaded()-before, int(f.loads.Load()-loads); got != want {
		t.Errorf("%d client reloads in %d loads while a node fails, want one each", got, want)
	}
}

// TestRetryOfRedirect: a redirect is followed at once, whatever the call.
func TestRetryOfRedirect(t *testing.T) {
	for _, msg := range []string{"MOVED 3999 127.0.0.1:6381", "ASK 3999 127.0.0.1:6381"} {
		for _, keys := range []int{1, 2} {
			for _, script := range []bool{false, true} {
				if r := RetryOf(msg, script, keys); r != RetryRedirect {
					t.Errorf("RetryOf(%q, script %v, %d keys) = %v, want RetryRedirect", msg, script, keys, r)
				}
			}
		}
	}
	if r := RetryOf("ERR MOVEDX", false, 1); r != RetryNone {
		t.Errorf("RetryOf(ERR MOVEDX) = %v, want RetryNone", r)
	}
}

// TestConnFailure: errors of the connection, not of the server or of the
// caller's context.
func TestConnFailure(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, true},
		{fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{io.EOF, true},
		{fmt.Errorf("ratekit: %w", io.ErrUnexpectedEOF), true},
		{context.DeadlineExceeded, false},
		{fmt.Errorf("ratekit: %w", context.Canceled), false},
		{errors.New("NOSCRIPT No matching script"), false},
		{errors.New("redis: connection pool timeout"), false},
	} {
		if got := ConnFailure(tc.err); got != tc.want {
			t.Errorf("ConnFailure(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
