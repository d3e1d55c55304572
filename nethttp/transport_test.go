package nethttp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/testkit"
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
	res, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode, nil
}

// TestTransportFleet: 4 instances x 5 goroutines send through one limit.
// With a limit of 10 per hour and 5 s to wait, exactly 10 requests reach
// the provider and the others fail at once; with 5 per 200 ms and no
// deadline, every request waits its turn and reaches it.
func TestTransportFleet(t *testing.T) {
	const n, m = 4, 5
	for _, in := range testkit.Backends() {
		t.Run(in.Name, func(t *testing.T) {
			t.Parallel()
			t.Run("deadline", func(t *testing.T) {
				p := newProvider(t)
				ls := testkit.Fleet(t, n, in, core.Policy{Name: "hour", Rules: []core.Rule{{Limit: 10, Window: time.Hour}}})
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				var ok, late atomic.Int64
				var wg sync.WaitGroup
				for _, l := range ls {
					c := &http.Client{Transport: nethttp.Transport(l, nil)}
					for range m {
						wg.Go(func() {
							status, err := post(ctx, c, p.URL, "{}")
							switch {
							case err == nil && status == http.StatusAccepted:
								ok.Add(1)
							case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
								late.Add(1)
							default:
								t.Errorf("post = %d, %v (context: %v); want 202 or an error wrapping DeadlineExceeded before the deadline", status, err, ctx.Err())
							}
						})
					}
				}
				wg.Wait()
				if ok.Load() != 10 || late.Load() != n*m-10 || p.hits.Load() != 10 {
					t.Errorf("%d sent, %d failed fast, %d reached the provider; want 10, %d, 10", ok.Load(), late.Load(), p.hits.Load(), n*m-10)
				}
			})
			t.Run("wait", func(t *testing.T) {
				p := newProvider(t)
				obs := &testkit.Events{}
				ls := testkit.Fleet(t, n, in, core.Policy{Name: "burst", Rules: []core.Rule{{Limit: 5, Window: 200 * time.Millisecond}}}, core.WithObserver(obs))
				var wg sync.WaitGroup
				for _, l := range ls {
					c := &http.Client{Transport: nethttp.Transport(l, nil)}
					for range m {
						wg.Go(func() {
							if status, err := post(context.Background(), c, p.URL, "{}"); err != nil || status != http.StatusAccepted {
								t.Errorf("post = %d, %v; want 202 after waiting", status, err)
							}
						})
					}
				}
				wg.Wait()
				if p.hits.Load() != n*m || obs.Denials() == 0 {
					t.Errorf("%d requests reached the provider after %d denials, want all %d after some waiting", p.hits.Load(), obs.Denials(), n*m)
				}
			})
		})
	}
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

// TestTransportPanics: what an outgoing request cannot honour is refused
// when the Transport is built, by a panic naming it, never at request
// time.
func TestTransportPanics(t *testing.T) {
	conc := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "conc", InFlight: 1})
	for name, tc := range map[string]struct {
		f    func()
		want string // in the panic's message
	}{
		"nil limiter": {func() { nethttp.Transport(nil, nil) }, "nil"},
		"WithCountIf": {func() {
			nethttp.Transport(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("test", testkit.PerHour(1))), nil, guard.WithCountIf(guard.StatusSuccess))
		}, "WithCountIf"},
		"WithResetIf": {func() {
			nethttp.Transport(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("test", testkit.PerHour(1))), nil, guard.WithResetIf(guard.StatusSuccess))
		}, "WithResetIf"},
		"InFlight": {func() { nethttp.Transport(conc, nil) }, `InFlight policy "conc"`},
		"InFlight added": {func() {
			nethttp.Transport(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("test", testkit.PerHour(1))), nil, guard.WithAlso(conc, keyfunc.Header("X-User")))
		}, `InFlight policy "conc"`},
		"WithRoute": {func() {
			nethttp.Transport(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("test", testkit.PerHour(1))), nil, nethttp.WithRoute(func(*http.Request) string { return "" }))
		}, "another adapter"},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				p := recover()
				if msg := fmt.Sprint(p); p == nil || !strings.Contains(msg, tc.want) || !strings.Contains(msg, "Transport") {
					t.Errorf("Transport with %s: panic %v, want one of Transport naming %q", name, p, tc.want)
				}
			}()
			tc.f()
		})
	}
}

// TestTransportBlock: WithBlock refuses an outgoing request before it
// waits or reaches base, with an error wrapping guard.ErrBlocked.
func TestTransportBlock(t *testing.T) {
	p := newProvider(t)
	banned := func(r keyfunc.Request) bool { return strings.Contains(r.Path(), "/banned") }
	c := &http.Client{Transport: nethttp.Transport(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("test", testkit.PerHour(5))), nil, guard.WithBlock(banned))}
	if _, err := post(context.Background(), c, p.URL+"/banned", "{}"); !errors.Is(err, guard.ErrBlocked) {
		t.Errorf("post to a blocked path = %v, want an error wrapping guard.ErrBlocked", err)
	}
	if status, err := post(context.Background(), c, p.URL+"/ok", "{}"); err != nil || status != http.StatusAccepted {
		t.Errorf("post = %d, %v; want 202", status, err)
	}
	if n := p.hits.Load(); n != 1 {
		t.Errorf("%d requests reached the provider, want 1", n)
	}
}

// sendTimes is a RoundTripper that records when each request leaves, and
// answers 202 without a network.
type sendTimes struct {
	mu    sync.Mutex
	times []time.Time
}

func (s *sendTimes) RoundTrip(r *http.Request) (*http.Response, error) {
	s.mu.Lock()
	s.times = append(s.times, time.Now())
	s.mu.Unlock()
	return &http.Response{StatusCode: http.StatusAccepted, Body: http.NoBody, Request: r}, nil
}

// maxIn returns the most times that lie within any span of d.
func maxIn(times []time.Time, d time.Duration) int {
	ts := slices.Clone(times)
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	most := 0
	for i := range ts {
		j := i
		for j < len(ts) && ts[j].Sub(ts[i]) < d {
			j++
		}
		most = max(most, j-i)
	}
	return most
}

// TestTransportAlsoHoldsWhenSent: with WithAlso, every limit holds at the
// moment a request leaves. A per-host limit of 5 per 200 ms and a global
// cap of 20 per second, full when the requests start: 30 requests never
// send more than 5 to the host within 200 ms, although the global cap
// frees 20 at once. (A unit of the per-host limit kept while waiting for
// the global one would be dated when taken, and 20 requests holding such
// units would leave together.)
func TestTransportAlsoHoldsWhenSent(t *testing.T) {
	t.Parallel()
	store := core.NewMemoryStore()
	host := testkit.Limiter(t, store, core.Policy{Name: "host", Rules: []core.Rule{{Limit: 5, Window: 200 * time.Millisecond}}})
	global := testkit.Limiter(t, store, core.Policy{Name: "global", Rules: []core.Rule{{Limit: 20, Window: time.Second}}})
	everyone := func(keyfunc.Request) (string, error) { return "all", nil }
	ctx := context.Background()
	if _, err := global.AllowN(ctx, "all", 20); err != nil {
		t.Fatal(err)
	}
	sent := &sendTimes{}
	c := &http.Client{Transport: nethttp.Transport(host, sent, guard.WithAlso(global, everyone))}
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range 30 {
		wg.Go(func() {
			if status, err := post(ctx, c, "http://provider.example/sms", "{}"); err != nil || status != http.StatusAccepted {
				failed.Add(1)
				t.Errorf("post = %d, %v", status, err)
			}
		})
	}
	wg.Wait()
	if n := len(sent.times); n != 30 || failed.Load() != 0 {
		t.Fatalf("%d requests sent, %d failed; want 30 sent", n, failed.Load())
	}
	// 180 ms rather than 200: scheduling may delay a request's departure
	// after its admission by a few milliseconds.
	if most := maxIn(sent.times, 180*time.Millisecond); most > 5 {
		t.Errorf("%d requests left within 180 ms; the per-host limit allows 5 per 200 ms", most)
	}
	if most := maxIn(sent.times, 900*time.Millisecond); most > 20 {
		t.Errorf("%d requests left within 900 ms; the global cap allows 20 per second", most)
	}
}
