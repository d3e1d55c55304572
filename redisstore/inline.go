package redisstore

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/internal/redislib"
)

// A lone caller runs its own flight (redislib.Batcher.SetInline): no
// hand-off to a flusher goroutine and back, whose two wake-ups cost a
// decision more client CPU than the rest of its work on the client. The
// flusher's other job is kept where the reply is read: the caller leaves
// when its context ends (the Limiter's timeout, judged by the Limiter:
// the process may be too busy to read a reply that came), and an answer
// Redis has sent by then is read and taken.
//
// go-redis bounds a read by the context's deadline alone, the latest a
// store call may wait (its timeout plus up to a second while the process
// is starved). So the connection the call reads on, one the store
// watches (replies), reads in short slices up to that deadline: at the
// end of each it reads on if bytes are waiting or the caller's context
// has not ended, and gives up otherwise. It knows the caller's read by
// its deadline, which the flight's context carries: the caller's own, to
// the nanosecond, but odd (redislib.InlineDeadline), where the flushers'
// are even, so that callers that share a deadline (their request's) do
// not share a read.

// readSlice is how long an inline read waits before it looks again at
// its caller's context.
const readSlice = time.Millisecond

// inlineRead is a lone caller's flight: its context, which ends with
// the caller's (Done, Err) and carries the deadline that names its read.
type inlineRead struct {
	context.Context // the caller's
	deadline        time.Time
}

// Deadline returns the caller's deadline, which names its read.
func (o *inlineRead) Deadline() (time.Time, bool) { return o.deadline, true }

// Value has none of the caller's values: a flight serves the store, not
// one request.
func (o *inlineRead) Value(any) any { return nil }

// next returns the read deadline of the next slice.
func (o *inlineRead) next() time.Time {
	return minTime(time.Now().Add(readSlice), o.deadline)
}

// goOn reports whether the read goes on at the end of a slice: a reply
// is waiting unread in the socket of raw, or the caller still waits.
func (o *inlineRead) goOn(c *trackedConn) bool {
	if n, ok := unreadBytes(c.raw); ok && n > 0 {
		return true
	}
	select {
	case <-o.Done():
		return false
	default:
	}
	return time.Now().Before(o.deadline)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// inline is the batcher's runner for a lone caller (see above). It runs
// only where the store can bound the read: a client that takes its read
// deadline from the context, on a connection the store watches.
func (s *Store) inline(ctx context.Context, c *redislib.Call) (ran bool, err error) {
	if !s.inlineOK || c.Deadline.IsZero() || s.replies.inline.Load() != nil {
		return false, nil
	}
	if rt := s.readTimeout; rt > 0 && time.Now().Add(rt).Before(c.Deadline) {
		return false, nil // go-redis would read to its own, earlier deadline
	}
	o := &inlineRead{Context: ctx, deadline: redislib.InlineDeadline(c.Deadline)}
	s.replies.inline.Store(o)
	c.One[0] = c
	s.flight(o, c.One[:])
	s.replies.inline.Store(nil)
	if c.Err != nil {
		if err := ctx.Err(); err != nil {
			return true, err
		}
	}
	return true, nil
}

// inlineOK reports whether client's reads can be bounded for a lone
// caller: the client takes its read deadline from the context, and its
// connections are plain ones, which the store watches (not TLS); and
// the client's own read timeout.
func inlineOK(client redis.UniversalClient) (ok bool, readTimeout time.Duration) {
	c, isClient := client.(*redis.Client)
	if !isClient {
		return false, 0
	}
	o := c.Options()
	// After go-redis's defaults, ReadTimeout -1 means no read deadline at
	// all, 0 the context's alone.
	return o.ContextTimeoutEnabled && o.TLSConfig == nil && o.ReadTimeout >= 0, o.ReadTimeout
}

// SetReadDeadline sets the read deadline, in slices for a lone caller's
// read (see inlineRead).
func (c *trackedConn) SetReadDeadline(t time.Time) error {
	c.owner = nil
	if o := c.r.inline.Load(); o != nil && t.Equal(o.deadline) {
		c.owner = o
		t = o.next()
	}
	return c.Conn.SetReadDeadline(t)
}

// readOn reports, after a read that failed with err, whether the read
// goes on (see inlineRead); it sets the next slice. A read taken for a
// lone caller's whose caller has left (its deadline was another read's
// too) reads on to that deadline, as go-redis set it.
func (c *trackedConn) readOn(err error) bool {
	o := c.owner
	if o == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	if c.r.inline.Load() != o {
		c.owner = nil
		return time.Now().Before(o.deadline) && c.Conn.SetReadDeadline(o.deadline) == nil
	}
	if !o.goOn(c) {
		c.owner = nil
		return false
	}
	return c.Conn.SetReadDeadline(o.next()) == nil
}
