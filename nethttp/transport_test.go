package nethttp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/nethttp"
)

// provider is a stand-in for an SMS provider: it counts the requests that
// reach it and keeps their bodies.
type provider struct {
	*httptest.Server
	hits   atomic.Int64
	mu     sync.Mutex
	bodies []string
}

func newProvider(t *testing.T) *provider {
	t.Helper()
	p := &provider{}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		p.hits.Add(1)
		p.mu.Lock()
		p.bodies = append(p.bodies, string(b))
		p.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(p.Close)
	return p
}

// post sends body to url through c under ctx and returns the status, or
// the error.
func post(ctx context.Context, c *http.Client, url, body string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	return do(c, req)
}

// do sends req through c and returns the status, or the error.
func do(c *http.Client, req *http.Request) (int, error) {
	res, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode, nil
}

// TestTransportKeys: the default key is the host, normalised; a key
// function may read the body, from a copy, and the provider still gets
// the whole body; a body it cannot copy is an error.
func TestTransportKeys(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a, b := newProvider(t), newProvider(t)
	l := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "hosts", Rules: []core.Rule{{Limit: 1, Window: time.Hour}}})
	c := &http.Client{Transport: nethttp.Transport(l, nil)}
	for _, url := range []string{a.URL, b.URL} {
		if status, err := post(ctx, c, url, "{}"); err != nil || status != http.StatusAccepted {
			t.Fatalf("first post to %s = %d, %v; want 202", url, status, err)
		}
	}
	// a's host spelled otherwise is the same key.
	other := strings.Replace(a.URL, "127.0.0.1", "127.0.0.1.", 1)
	if _, err := post(ctx, c, other, "{}"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("second post to %s = %v, want DeadlineExceeded: one key per host", other, err)
	}
	if a.hits.Load() != 1 || b.hits.Load() != 1 {
		t.Errorf("hits %d and %d, want 1 each", a.hits.Load(), b.hits.Load())
	}

	// Keyed by the body.
	bodyKey := func(r keyfunc.Request) (string, error) {
		body, err := r.Body(64)
		return string(body), err
	}
	p := newProvider(t)
	c = &http.Client{Transport: nethttp.Transport(l, nil, guard.WithKey(bodyKey))}
	for _, body := range []string{`{"to":"+8613800138000"}`, `{"to":"+8613900139000"}`} {
		if status, err := post(ctx, c, p.URL, body); err != nil || status != http.StatusAccepted {
			t.Fatalf("post %s = %d, %v; want 202", body, status, err)
		}
	}
	if _, err := post(ctx, c, p.URL, `{"to":"+8613800138000"}`); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("post to a number again = %v, want DeadlineExceeded", err)
	}
	if _, err := post(ctx, c, p.URL, strings.Repeat("x", 65)); !errors.Is(err, keyfunc.ErrBodyTooLarge) {
		t.Errorf("post of a body longer than the key may read = %v, want ErrBodyTooLarge", err)
	}
	if got := strings.Join(p.bodies, " "); got != `{"to":"+8613800138000"} {"to":"+8613900139000"}` {
		t.Errorf("the provider got %q, want both bodies whole", got)
	}
	// A body without GetBody cannot be read without consuming it.
	body := &closeRecorder{Reader: strings.NewReader("{}")}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, p.URL, body)
	if _, err := c.Do(req); err == nil || !strings.Contains(err.Error(), "GetBody") || !body.closed.Load() {
		t.Errorf("post of a body without GetBody = %v, closed %v; want an error naming GetBody, body closed", err, body.closed.Load())
	}
	if p.hits.Load() != 2 {
		t.Errorf("%d requests reached the provider, want 2", p.hits.Load())
	}
}

type closeRecorder struct {
	io.Reader
	closed atomic.Bool
}

func (c *closeRecorder) Close() error {
	c.closed.Store(true)
	return nil
}

// TestTransportContext: a request whose context ends while it waits fails
// with the context's error without reaching the provider, and the request
// is not modified.
func TestTransportContext(t *testing.T) {
	p := newProvider(t)
	obs := &testkit.Events{}
	l := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "ctx", Rules: []core.Rule{{Limit: 1, Window: time.Hour}}}, core.WithObserver(obs))
	rt := nethttp.Transport(l, nil)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, p.URL, strings.NewReader("{}"))
	res, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	req2, _ := http.NewRequestWithContext(ctx, http.MethodPost, p.URL, strings.NewReader("{}"))
	body, header := req2.Body, req2.Header
	done := make(chan error, 1)
	go func() {
		_, err := rt.RoundTrip(req2)
		done <- err
	}()
	testkit.WaitUntil(t, "the second request waits", func() bool { return obs.Denials() == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("RoundTrip with its context canceled while waiting = %v, want context.Canceled", err)
	}
	if req2.Body != body || len(header) != 0 || req2.URL.String() != p.URL {
		t.Errorf("the request was modified")
	}
	if p.hits.Load() != 1 {
		t.Errorf("%d requests reached the provider, want 1", p.hits.Load())
	}
}

// idleCloser records CloseIdleConnections.
type idleCloser struct {
	http.RoundTripper
	closed bool
}

func (c *idleCloser) CloseIdleConnections() { c.closed = true }

func TestTransportCloseIdleConnections(t *testing.T) {
	base := &idleCloser{RoundTripper: http.DefaultTransport}
	c := &http.Client{Transport: nethttp.Transport(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("test", testkit.PerHour(1))), base)}
	c.CloseIdleConnections()
	if !base.closed {
		t.Error("http.Client.CloseIdleConnections did not reach the base RoundTripper")
	}
}

// TestTransportPanicsOnMiddlewareOption: an option of this package's
// middleware is refused when the Transport is built, by a panic naming
// it. (A nil limiter and what outgoing requests cannot honour are cases
// of the outbound suite.)
func TestTransportPanicsOnMiddlewareOption(t *testing.T) {
	l := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("test", testkit.PerHour(1)))
	defer func() {
		p := recover()
		if msg := fmt.Sprint(p); p == nil || !strings.Contains(msg, "another adapter") || !strings.Contains(msg, "Transport") {
			t.Errorf("Transport with WithRoute: panic %v, want one of Transport naming another adapter", p)
		}
	}()
	nethttp.Transport(l, nil, nethttp.WithRoute(func(*http.Request) string { return "" }))
}

// TestTransportPanicSaysRatekitOnce: what outgoing requests cannot honour
// is refused by a panic naming it, which says "ratekit:" once though the
// guard's reason has it too.
func TestTransportPanicSaysRatekitOnce(t *testing.T) {
	l := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("test", testkit.PerHour(1)))
	defer func() {
		p := recover()
		if msg := fmt.Sprint(p); p == nil || !strings.HasPrefix(msg, "ratekit: nethttp: Transport: ") ||
			!strings.Contains(msg, "WithCountIf") || strings.Count(msg, "ratekit: ") != 1 {
			t.Errorf("Transport with WithCountIf: panic %v, want one naming it, saying ratekit once", p)
		}
	}()
	nethttp.Transport(l, nil, guard.WithCountIf(func(int) bool { return true }))
}
