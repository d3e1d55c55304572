package nethttp_test

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/nethttp"
)

// constKey puts every request in one bucket.
func constKey(keyfunc.Request) (string, error) { return "k", nil }

// rawStatus sends a GET over a new connection and returns the final
// status the client got: the first one that is not a 1xx informational
// response, 101 Switching Protocols being final.
func rawStatus(t *testing.T, addr string) int {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	for {
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("reading the response: %v", err)
		}
		if res.StatusCode >= 200 || res.StatusCode == http.StatusSwitchingProtocols {
			return res.StatusCode
		}
	}
}

// upgrade answers 101 on the hijacked connection, as a WebSocket server
// does.
func upgrade(w http.ResponseWriter, c net.Conn, brw *bufio.ReadWriter, err error) {
	if err != nil {
		http.Error(w, "hijack: "+err.Error(), http.StatusInternalServerError)
		return
	}
	defer c.Close()
	_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: test\r\nConnection: Upgrade\r\n\r\n")
	_ = brw.Flush()
}

// TestStatusRecorded: with WithCountIf the status finished is the final
// one the client got.
func TestStatusRecorded(t *testing.T) {
	isUpgrade := func(s int) bool { return s == http.StatusSwitchingProtocols }
	tests := []struct {
		name    string
		handler http.HandlerFunc
		count   func(status int) bool
		want    []int // statuses of two requests, limit 1
	}{
		{
			name: "hijacked upgrade through ResponseController counts as 101",
			handler: func(w http.ResponseWriter, r *http.Request) {
				c, brw, err := http.NewResponseController(w).Hijack()
				upgrade(w, c, brw, err)
			},
			count: isUpgrade, want: []int{101, 429},
		},
		{
			name: "hijacked upgrade through a Hijacker assertion counts as 101",
			handler: func(w http.ResponseWriter, r *http.Request) {
				h, ok := w.(http.Hijacker)
				if !ok {
					http.Error(w, "no Hijacker", http.StatusInternalServerError)
					return
				}
				c, brw, err := h.Hijack()
				upgrade(w, c, brw, err)
			},
			count: isUpgrade, want: []int{101, 429},
		},
		{
			name: "101 then 401: the client got 101",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusSwitchingProtocols)
				w.WriteHeader(http.StatusUnauthorized) // superfluous
			},
			count: guard.StatusAuthFailure, want: []int{101, 101},
		},
		{
			name: "103 Early Hints then 401",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Link", "</style.css>; rel=preload; as=style")
				w.WriteHeader(http.StatusEarlyHints)
				w.WriteHeader(http.StatusUnauthorized)
			},
			count: guard.StatusAuthFailure, want: []int{401, 429},
		},
		{
			name: "103 Early Hints then a body is 200",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusEarlyHints)
				_, _ = io.WriteString(w, "ok")
			},
			count: func(s int) bool { return s == http.StatusOK }, want: []int{200, 429},
		},
		{
			name: "401 then 200: the client got 401",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusUnauthorized)
				w.WriteHeader(http.StatusOK) // superfluous
			},
			count: guard.StatusAuthFailure, want: []int{401, 429},
		},
		{
			name: "ReadFrom is 200",
			handler: func(w http.ResponseWriter, r *http.Request) {
				_, _ = w.(io.ReaderFrom).ReadFrom(strings.NewReader("ok"))
			},
			count: func(s int) bool { return s == http.StatusOK }, want: []int{200, 429},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.handler
			srv := httptest.NewUnstartedServer(nethttp.New(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("test", testkit.PerHour(1))), guard.WithKey(constKey), guard.WithCountIf(tc.count))(h))
			srv.Config.ErrorLog = log.New(io.Discard, "", 0) // superfluous WriteHeader calls are the point
			srv.Start()
			defer srv.Close()
			var got []int
			for range tc.want {
				got = append(got, rawStatus(t, srv.Listener.Addr().String()))
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("statuses %v, want %v", got, tc.want)
			}
		})
	}
}

// interfaces names the optional interfaces of a writer.
func interfaces(w http.ResponseWriter) string {
	var s []string
	if _, ok := w.(http.Flusher); ok {
		s = append(s, "Flusher")
	}
	if _, ok := w.(http.Hijacker); ok {
		s = append(s, "Hijacker")
	}
	if _, ok := w.(io.ReaderFrom); ok {
		s = append(s, "ReaderFrom")
	}
	if _, ok := w.(http.Pusher); ok {
		s = append(s, "Pusher")
	}
	return strings.Join(s, "+")
}

// bareWriter is a ResponseWriter with no optional interface.
type bareWriter struct {
	h    http.Header
	code int
}

func (b *bareWriter) Header() http.Header         { return b.h }
func (b *bareWriter) Write(p []byte) (int, error) { return len(p), nil }
func (b *bareWriter) WriteHeader(code int)        { b.code = code }

// hijackOnly and readerFromOnly have one optional interface each.
type (
	hijackOnly struct{ bareWriter }
	pushOnly   struct{ bareWriter }
)

func (hijackOnly) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return nil, nil, http.ErrNotSupported
}
func (pushOnly) Push(string, *http.PushOptions) error { return http.ErrNotSupported }

// TestWriterInterfaces: with or without count-if, the handler's writer
// has exactly the optional interfaces of the server's, and
// http.ResponseController reports what the server's writer cannot do.
func TestWriterInterfaces(t *testing.T) {
	type seen struct {
		ifaces   string
		flushErr error
	}
	probe := func(out *seen) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			out.ifaces = interfaces(w)
			out.flushErr = http.NewResponseController(w).Flush()
		})
	}
	overServer := func(tls2 bool) func(t *testing.T, h http.Handler) {
		return func(t *testing.T, h http.Handler) {
			srv := httptest.NewUnstartedServer(h)
			if tls2 {
				srv.EnableHTTP2 = true
				srv.StartTLS()
			} else {
				srv.Start()
			}
			defer srv.Close()
			c := srv.Client()
			if tls2 {
				c.Transport.(*http.Transport).TLSClientConfig = &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}} //nolint:gosec // test server
				c.Transport.(*http.Transport).ForceAttemptHTTP2 = true
			}
			res, err := c.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
	}
	direct := func(w http.ResponseWriter) func(t *testing.T, h http.Handler) {
		return func(t *testing.T, h http.Handler) { h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil)) }
	}
	tests := []struct {
		name     string
		serve    func(t *testing.T, h http.Handler)
		want     string
		flushErr bool
	}{
		{"HTTP/1.1 server", overServer(false), "Flusher+Hijacker+ReaderFrom", false},
		{"HTTP/2 server", overServer(true), "Flusher+Pusher", false},
		{"ResponseRecorder", direct(httptest.NewRecorder()), "Flusher", false},
		{"bare writer", direct(&bareWriter{h: http.Header{}}), "", true},
		{"hijack only", direct(&hijackOnly{bareWriter{h: http.Header{}}}), "Hijacker", true},
		{"push only", direct(&pushOnly{bareWriter{h: http.Header{}}}), "Pusher", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var plain, counted seen
			tc.serve(t, probe(&plain))
			mw := nethttp.New(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("test", testkit.PerHour(100))), guard.WithKey(constKey), guard.WithCountIf(guard.StatusAuthFailure))
			tc.serve(t, mw(probe(&counted)))
			if plain.ifaces != tc.want {
				t.Fatalf("server writer has %q, want %q: the test's premise is wrong", plain.ifaces, tc.want)
			}
			if counted.ifaces != tc.want {
				t.Errorf("with count-if the handler sees %q, want %q", counted.ifaces, tc.want)
			}
			if (counted.flushErr != nil) != tc.flushErr || (plain.flushErr != nil) != tc.flushErr {
				t.Errorf("ResponseController.Flush = %v (without count-if %v), want an error: %v", counted.flushErr, plain.flushErr, tc.flushErr)
			}
		})
	}
}
