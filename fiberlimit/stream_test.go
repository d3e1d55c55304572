package fiberlimit_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/fiberlimit"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/keyfunc"
)

// inFlightLimiter returns a limiter of at most k requests in flight per
// key, on a fresh MemoryStore.
func inFlightLimiter(t *testing.T, k int64) *core.Limiter {
	t.Helper()
	return testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "downloads", InFlight: k})
}

// inFlight returns the leases key holds on l.
func inFlight(t *testing.T, l *core.Limiter, key string) int64 {
	t.Helper()
	d, err := l.Peek(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return d.Rules()[0].Used
}

// TestInFlightStreams: a streamed body (SetBodyStreamWriter, SendStream)
// is written after the handler chain returns; its request stays in
// flight, holding its lease, until the body is written. With InFlight 1,
// four concurrent GETs whose stream blocks: one streams, three get 429.
func TestInFlightStreams(t *testing.T) {
	for _, send := range []struct {
		name string
		send func(c *fiber.Ctx, body func(w io.Writer)) error
	}{
		{"SetBodyStreamWriter", func(c *fiber.Ctx, body func(w io.Writer)) error {
			c.Context().SetBodyStreamWriter(func(w *bufio.Writer) { body(w) })
			return nil
		}},
		{"SendStream", func(c *fiber.Ctx, body func(w io.Writer)) error {
			pr, pw := io.Pipe()
			go func() { body(pw); pw.Close() }()
			return c.SendStream(pr)
		}},
	} {
		t.Run(send.name, func(t *testing.T) {
			l := inFlightLimiter(t, 1)
			var streaming, most atomic.Int64
			started := make(chan struct{}, 4)
			gate := make(chan struct{})
			app := fiber.New(fiber.Config{DisableStartupMessage: true})
			app.Get("/download", fiberlimit.New(l, guard.WithKey(keyfunc.Header("X-User"))), func(c *fiber.Ctx) error {
				return send.send(c, func(w io.Writer) {
					n := streaming.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					_, _ = io.WriteString(w, "first part\n")
					if f, ok := w.(interface{ Flush() error }); ok {
						_ = f.Flush()
					}
					started <- struct{}{}
					<-gate
					_, _ = io.WriteString(w, "last part\n")
					streaming.Add(-1)
				})
			})
			url := serve(t, app) + "/download"
			c := client(t)
			var wg sync.WaitGroup
			statuses := make(chan int, 4)
			for range 4 {
				wg.Go(func() {
					req, _ := http.NewRequest(http.MethodGet, url, nil)
					req.Header.Set("X-User", "alice")
					res, err := c.Do(req)
					if err != nil {
						t.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, res.Body)
					res.Body.Close()
					statuses <- res.StatusCode
				})
			}
			// One stream starts; the three others are refused while it runs.
			select {
			case <-started:
			case <-time.After(10 * time.Second):
				t.Fatal("no stream started within 10s")
			}
			got := map[int]int{}
			for range 3 {
				select {
				case s := <-statuses:
					got[s]++
				case <-time.After(10 * time.Second):
					close(gate)
					t.Fatalf("statuses so far %v, %d bodies streaming; the other requests did not end within 10s", got, streaming.Load())
				}
			}
			if got[http.StatusTooManyRequests] != 3 {
				t.Errorf("while one body streams: statuses %v, want 3 × 429", got)
			}
			if n := inFlight(t, l, "alice"); n != 1 {
				t.Errorf("while one body streams: %d leases held, want 1", n)
			}
			close(gate)
			wg.Wait()
			if s := <-statuses; s != http.StatusOK {
				t.Errorf("the streamed request: status %d, want 200", s)
			}
			if m := most.Load(); m != 1 {
				t.Errorf("%d bodies streamed at once, want 1", m)
			}
			testkit.WaitUntil(t, "the lease released after the body", func() bool { return inFlight(t, l, "alice") == 0 })
		})
	}
}

// TestInFlightSendFile: a file sent with SendFile holds the lease until
// it is written: a client that does not read a large file keeps its
// request in flight.
func TestInFlightSendFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.bin")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	// Sparse: larger than what loopback socket buffers hold, cheap to make.
	if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	l := inFlightLimiter(t, 1)
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Get("/file", fiberlimit.New(l, guard.WithKey(keyfunc.Header("X-User"))), func(c *fiber.Ctx) error {
		return c.SendFile(path)
	})
	url := serve(t, app) + "/file"
	c := client(t)
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("X-User", "alice")
	res, err := c.Do(req) // the headers only: the body is not read yet
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		t.Fatalf("first download: status %d, want 200", res.StatusCode)
	}
	second, err := c.Do(req.Clone(context.Background()))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, second.Body)
	second.Body.Close()
	if second.StatusCode != http.StatusTooManyRequests {
		t.Errorf("second download while the first is being sent: status %d, want 429", second.StatusCode)
	}
	n, _ := io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if n != 64<<20 {
		t.Errorf("first download: %d bytes, want %d", n, 64<<20)
	}
	testkit.WaitUntil(t, "the lease released after the file", func() bool { return inFlight(t, l, "alice") == 0 })
}

// TestInFlightStreamClientGone: a client that goes away mid-stream ends
// its request: the lease is released though the body was never written
// in full.
func TestInFlightStreamClientGone(t *testing.T) {
	l := inFlightLimiter(t, 1)
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Get("/endless", fiberlimit.New(l, guard.WithKey(keyfunc.Header("X-User"))), func(c *fiber.Ctx) error {
		c.Context().SetBodyStreamWriter(func(w *bufio.Writer) {
			chunk := make([]byte, 32<<10)
			for {
				if _, err := w.Write(chunk); err != nil {
					return
				}
				if err := w.Flush(); err != nil {
					return
				}
			}
		})
		return nil
	})
	url := serve(t, app) + "/endless"
	c := client(t)
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("X-User", "alice")
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(res.Body, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	if n := inFlight(t, l, "alice"); n != 1 {
		t.Errorf("while the body streams: %d leases, want 1", n)
	}
	res.Body.Close() // the connection ends mid-body
	testkit.WaitUntil(t, "the lease released after the client left", func() bool { return inFlight(t, l, "alice") == 0 })
}
