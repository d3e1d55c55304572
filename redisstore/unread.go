package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// replies keeps the connections the client dials from the store's start
// on, to tell whether Redis has sent anything since a call began
// ([Store.Answered]): read since, or waiting unread in a socket. A process
// starved of CPU reads its replies late, and waits on for them, and a
// Redis that shares the starved CPU answers late but answers; a Redis that
// does not answer sends nothing.
type replies struct {
	last    atomic.Int64                // unix nanoseconds of the latest read of a reply's bytes
	dialErr atomic.Pointer[dialFailure] // the latest dial's failure; nil once a dial succeeds
	inline  atomic.Pointer[inlineRead]  // a lone caller's read under way, if any
	mu      sync.Mutex
	conns   map[*trackedConn]struct{}
}

// dialFailure is a dial of the client that failed, and when.
type dialFailure struct {
	err error
	at  time.Time
}

// explain adds to err, a call's timeout, why the client could not send
// it: its latest dial failed, within the last 10 seconds (go-redis dials
// again and again in the background, and a call that waits for a
// connection times out with no word of the refused connection).
func (r *replies) explain(err error) error {
	f := r.dialErr.Load()
	if f == nil || time.Since(f.at) > 10*time.Second || !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("%w (the client cannot connect: %w)", err, f.err)
}

// hook is the go-redis hook that tracks the connections dialled.
func (r *replies) hook() redis.Hook { return repliesHook{r} }

type repliesHook struct{ r *replies }

func (h repliesHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil {
			if ctx.Err() == nil { // not a dial its caller gave up
				h.r.dialErr.Store(&dialFailure{err: err, at: time.Now()})
			}
			return c, err
		}
		h.r.dialErr.Store(nil)
		sc, ok := c.(syscall.Conn)
		if !ok {
			return c, nil // a TLS or other connection: not watched
		}
		raw, err := sc.SyscallConn()
		if err != nil {
			return c, nil
		}
		tc := &trackedConn{Conn: c, raw: raw, r: h.r}
		h.r.mu.Lock()
		if h.r.conns == nil {
			h.r.conns = make(map[*trackedConn]struct{})
		}
		h.r.conns[tc] = struct{}{}
		h.r.mu.Unlock()
		return tc, nil
	}
}

func (repliesHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (repliesHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// trackedConn is a connection of the client whose unread bytes can be
// asked for; it forgets itself when closed.
type trackedConn struct {
	net.Conn
	raw   syscall.RawConn
	r     *replies
	once  sync.Once
	owner *inlineRead // the lone caller whose reply is read, if any (see inlineRead)
}

// SyscallConn returns the connection's raw connection: go-redis checks a
// pooled connection's health through it before it uses it.
func (c *trackedConn) SyscallConn() (syscall.RawConn, error) { return c.raw, nil }

// Read reads as the connection does, and notes when bytes came; a lone
// caller's read goes on slice after slice (see inlineRead).
func (c *trackedConn) Read(b []byte) (int, error) {
	for {
		n, err := c.Conn.Read(b)
		if n > 0 {
			c.r.last.Store(time.Now().UnixNano())
		}
		if err == nil || n > 0 || !c.readOn(err) {
			return n, err
		}
	}
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.r.mu.Lock()
		delete(c.r.conns, c)
		c.r.mu.Unlock()
	})
	return c.Conn.Close()
}

// since reports whether Redis has sent bytes since t: read by a goroutine
// since, or waiting unread in a connection's socket; and whether it could
// tell.
func (r *replies) since(t time.Time) (answered, known bool) {
	if r.last.Load() >= t.UnixNano() {
		return true, true
	}
	return r.waiting()
}

// waiting reports whether a connection of the client holds bytes no one
// has read, and whether any connection could be asked.
func (r *replies) waiting() (unread, known bool) {
	r.mu.Lock()
	conns := make([]*trackedConn, 0, len(r.conns))
	for c := range r.conns {
		conns = append(conns, c)
	}
	r.mu.Unlock()
	for _, c := range conns {
		n, ok := unreadBytes(c.raw)
		if !ok {
			return false, false
		}
		known = true
		if n > 0 {
			return true, true
		}
	}
	return false, known
}

// track makes client's connections dialled from now on watched.
func (r *replies) track(client redis.UniversalClient) {
	switch c := client.(type) {
	case *redis.Client:
		c.AddHook(r.hook())
	case *redis.ClusterClient:
		c.OnNewNode(func(n *redis.Client) { n.AddHook(r.hook()) })
	}
}
