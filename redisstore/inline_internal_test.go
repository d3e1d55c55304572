package redisstore

import (
	"context"
	"errors"
	"net"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// pipe returns a tracked loopback connection of r (the client's side) and
// its peer (the server's side).
func pipe(t *testing.T, r *replies) (*trackedConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(); _ = peer.Close() })
	return &trackedConn{Conn: c, raw: raw, r: r}, peer
}

// TestInlineReadTakesWaitingReply: a lone caller's read whose slice has
// passed while its reply waited unread (a process too busy to read it)
// reads the reply, even once the caller's context has ended: the reply
// came, the store answered.
func TestInlineReadTakesWaitingReply(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("unread bytes are known on Linux only")
	}
	r := new(replies)
	c, peer := pipe(t, r)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	o := &inlineRead{Context: ctx, deadline: time.Now().Add(time.Hour)}
	r.inline.Store(o)
	if err := c.SetReadDeadline(o.deadline); err != nil {
		t.Fatal(err)
	}
	if _, err := peer.Write([]byte("+OK\r\n")); err != nil {
		t.Fatal(err)
	}
	// The slice ends before the read begins; the reply is in the socket.
	for n, ok := unreadBytes(c.raw); !ok || n == 0; n, ok = unreadBytes(c.raw) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(3 * readSlice)
	buf := make([]byte, 16)
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != "+OK\r\n" {
		t.Fatalf("Read = %q, %v; want the waiting reply", buf[:n], err)
	}
}

// TestInlineReadEndsWithCaller: a lone caller's read of a reply that does
// not come goes on while the caller waits, and ends once the caller's
// context has ended, not at the deadline that names it (an hour away).
func TestInlineReadEndsWithCaller(t *testing.T) {
	r := new(replies)
	c, _ := pipe(t, r)
	ctx, cancel := context.WithCancel(context.Background())
	o := &inlineRead{Context: ctx, deadline: time.Now().Add(time.Hour)}
	r.inline.Store(o)
	if err := c.SetReadDeadline(o.deadline); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 16))
		done <- err
	}()
	// Several slices pass with the caller waiting: the read goes on.
	time.Sleep(10 * readSlice)
	select {
	case err := <-done:
		t.Fatalf("Read ended with the caller still waiting: %v", err)
	default:
	}
	cancel()
	if err := <-done; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read after the caller's end = %v, want a deadline error", err)
	}
	// Another read on the connection, not the caller's, keeps its own
	// deadline.
	if err := c.SetReadDeadline(time.Now().Add(time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if c.owner != nil {
		t.Error("a read with another deadline was taken for the caller's")
	}
}
