package personal_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/keyfunc"
)

// req is a request for a key function test: target "" means "/", ctype ""
// sends no Content-Type, and headers are name, value pairs.
type req struct {
	target, ctype, body string
	headers             []string
}

// build returns the *http.Request for rq.
func (rq req) build(t testing.TB) *http.Request {
	t.Helper()
	if len(rq.headers)%2 != 0 {
		t.Fatalf("req: odd number of header arguments")
	}
	target := rq.target
	if target == "" {
		target = "/"
	}
	var body io.Reader
	if rq.body != "" {
		body = strings.NewReader(rq.body)
	}
	r := httptest.NewRequest("POST", target, body)
	if rq.ctype != "" {
		r.Header.Set("Content-Type", rq.ctype)
	}
	for i := 0; i < len(rq.headers); i += 2 {
		r.Header.Add(rq.headers[i], rq.headers[i+1])
	}
	return r
}

// header returns a request carrying one header.
func header(t testing.TB, name, value string) keyfunc.Request {
	t.Helper()
	return keyfunc.FromHTTP(req{headers: []string{name, value}}.build(t), "")
}

// want is the expected outcome of a key function: key, or an error that
// wraps err and has the given reason ("" for any).
type want struct {
	key    string
	err    error
	reason string
}

// check runs f on rq, compares the outcome with w, and checks that the
// handler can still read the whole body.
func check(t *testing.T, f keyfunc.Func, rq req, w want) {
	t.Helper()
	r := rq.build(t)
	got, err := f(keyfunc.FromHTTP(r, ""))
	switch {
	case w.err != nil:
		if !errors.Is(err, w.err) || got != "" {
			t.Errorf("key = %q, %v; want error %v", got, err, w.err)
		} else if w.reason != "" && keyfunc.Reason(err) != w.reason {
			t.Errorf("Reason(%v) = %q, want %q", err, keyfunc.Reason(err), w.reason)
		}
	case err != nil || got != w.key:
		t.Errorf("key = %q, %v; want %q", got, err, w.key)
	}
	if rest, err := io.ReadAll(r.Body); err != nil || string(rest) != rq.body {
		t.Errorf("body after the key function = %q, %v; want %q", rest, err, rq.body)
	}
}
