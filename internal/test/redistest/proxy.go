package redistest

import (
	"bytes"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is a loopback TCP proxy to a server, for faults that Redis itself
// cannot produce: latency on replies, and replies lost after the command
// ran. Its methods are safe for concurrent use.
//
// The proxy sees bytes, not commands. It treats each chunk of data a
// client writes as one request, which holds for a go-redis client that
// does not pipeline: each command goes out in one write, and the next one
// only after the reply.
type Proxy struct {
	*relay
	target string

	latency  atomic.Int64           // time.Duration added to every reply chunk
	drop     atomic.Pointer[[]byte] // drop the reply to the next request that holds these bytes (lower case)
	dropAll  atomic.Bool            // drop every connection (SetDropping)
	requests atomic.Int64
	dropped  atomic.Int64
	accepted atomic.Int64
}

// NewProxy starts a proxy on a free port of 127.0.0.1 that forwards every
// connection to target, and registers a cleanup that closes it.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	r, err := newRelay()
	if err != nil {
		t.Fatalf("redistest: proxy: %v", err)
	}
	p := &Proxy{relay: r, target: target}
	r.start(p.admit, p.serve)
	t.Cleanup(p.Close)
	return p
}

// Addr returns the proxy's address, "127.0.0.1:port".
func (p *Proxy) Addr() string { return p.addr() }

// SetLatency delays every reply chunk by d from now on; 0 removes the
// delay.
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

// DropNextReply makes the proxy forward the next request of any client to
// the server as usual, but close that client's connection instead of
// forwarding the server's reply. The command runs; the client sees a
// broken connection, and go-redis retries the command on a new one.
func (p *Proxy) DropNextReply() { p.drop.Store(&[]byte{}) }

// DropNextReplyTo is DropNextReply for the next request that holds
// command, in any case ("fcall"), so that what a client sends by itself
// meanwhile (a health check, an announcement) keeps its reply.
func (p *Proxy) DropNextReplyTo(command string) {
	b := bytes.ToLower([]byte(command))
	p.drop.Store(&b)
}

// Requests returns the number of requests (client write chunks) forwarded
// to the server so far.
func (p *Proxy) Requests() int64 { return p.requests.Load() }

// Dropped returns the number of replies dropped so far.
func (p *Proxy) Dropped() int64 { return p.dropped.Load() }

// Conns returns the number of client connections accepted so far.
func (p *Proxy) Conns() int64 { return p.accepted.Load() }

// Close stops the proxy, closes every connection and waits for its
// goroutines to exit. Closing twice does nothing.
func (p *Proxy) Close() { p.close() }

// admit counts an accepted connection and refuses it while SetDropping
// is on.
func (p *Proxy) admit(net.Conn) bool {
	p.accepted.Add(1)
	return !p.dropAll.Load()
}

// serve pumps one client connection to a fresh server connection.
func (p *Proxy) serve(client net.Conn) {
	defer p.untrack(client)
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return
	}
	if !p.track(server) {
		return
	}
	defer p.untrack(server)
	var dropReply atomic.Bool
	upDone := make(chan struct{})
	go func() {
		defer close(upDone)
		// When either direction ends, end both.
		defer client.Close()
		defer server.Close()
		buf := make([]byte, 32<<10)
		for {
			n, err := client.Read(buf)
			if n > 0 {
				if m := p.drop.Load(); m != nil && bytes.Contains(bytes.ToLower(buf[:n]), *m) && p.drop.CompareAndSwap(m, nil) {
					dropReply.Store(true)
				}
				p.requests.Add(1)
				if _, werr := server.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			if dropReply.Load() {
				p.dropped.Add(1)
				break
			}
			if d := time.Duration(p.latency.Load()); d > 0 {
				tm := time.NewTimer(d)
				select {
				case <-tm.C:
				case <-p.done:
					tm.Stop()
				}
			}
			if _, werr := client.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_ = client.Close()
	_ = server.Close()
	<-upDone
}
