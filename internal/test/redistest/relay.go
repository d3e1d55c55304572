package redistest

import (
	"fmt"
	"net"
	"sync"
)

// relay is a listener on a free port of 127.0.0.1 whose connections are
// tracked, so that close ends every one of them and waits for the
// goroutines serving them: what Proxy and the Sentinel delay line share.
type relay struct {
	ln   net.Listener
	done chan struct{} // closed by close

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
	once   sync.Once
}

func newRelay() (*relay, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	return &relay{ln: ln, done: make(chan struct{}), conns: make(map[net.Conn]struct{})}, nil
}

// start accepts connections until close; admit (nil: all) may refuse one,
// which is then closed; serve runs on its own goroutine for each other.
func (r *relay) start(admit func(net.Conn) bool, serve func(net.Conn)) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			c, err := r.ln.Accept()
			if err != nil {
				return
			}
			if !r.track(c) {
				return
			}
			if admit != nil && !admit(c) {
				r.untrack(c)
				continue
			}
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				serve(c)
			}()
		}
	}()
}

func (r *relay) addr() string { return r.ln.Addr().String() }

// close stops accepting, closes every connection and waits for the
// goroutines to exit. Closing twice does nothing.
func (r *relay) close() {
	r.once.Do(func() {
		r.mu.Lock()
		r.closed = true
		close(r.done)
		for c := range r.conns {
			_ = c.Close()
		}
		r.mu.Unlock()
		_ = r.ln.Close()
		r.wg.Wait()
	})
}

// track registers c for close; it reports false (and closes c) when the
// relay is closed.
func (r *relay) track(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		_ = c.Close()
		return false
	}
	r.conns[c] = struct{}{}
	return true
}

func (r *relay) untrack(c net.Conn) {
	_ = c.Close()
	r.mu.Lock()
	delete(r.conns, c)
	r.mu.Unlock()
}

// closeAll closes every connection open now; new ones are served as usual.
func (r *relay) closeAll() {
	r.mu.Lock()
	conns := make([]net.Conn, 0, len(r.conns))
	for c := range r.conns {
		conns = append(conns, c)
	}
	r.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}
