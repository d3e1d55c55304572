package keyfunc_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/keyfunc"
)

func TestFromHTTP(t *testing.T) {
	t.Parallel()
	r := httptest.NewRequest("PUT", "/users/7?a=1&b=x+y&a=2", nil)
	r.RemoteAddr = "[2001:db8::1]:443"
	r.Header.Add("X-Multi", "one")
	r.Header.Add("X-Multi", "two")
	r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, "ctx"))

	v := keyfunc.FromHTTP(r, "/users/:id")
	checks := []struct{ name, got, want string }{
		{"Method", v.Method(), "PUT"},
		{"Route", v.Route(), "/users/:id"},
		{"Path", v.Path(), "/users/7"},
		{"Header", v.Header("x-multi"), "one"},
		{"Values", strings.Join(v.Values("X-Multi"), ","), "one,two"},
		{"Query first", v.Query("a"), "1"},
		{"Query unescaped", v.Query("b"), "x y"},
		{"Query absent", v.Query("c"), ""},
		{"RemoteAddr", v.RemoteAddr(), "[2001:db8::1]:443"},
		{"Route without pattern", keyfunc.FromHTTP(r, "").Route(), "/users/7"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.name, c.got, c.want)
		}
	}
	if v.Context() != r.Context() {
		t.Errorf("Context is not the request's context")
	}
	if got := v.Value(ctxKey{}); got != "ctx" {
		t.Errorf("Value = %v, want ctx", got)
	}

	locals := func(key any) any {
		if key == "local" {
			return "L"
		}
		return nil
	}
	w := keyfunc.FromHTTPWithValues(r, "", keyfunc.LocalsFunc(locals))
	if got := w.Value("local"); got != "L" {
		t.Errorf("Value(local) = %v, want L", got)
	}
	if got := w.Value(ctxKey{}); got != "ctx" {
		t.Errorf("Value(ctxKey) = %v, want ctx (falls through to the context)", got)
	}
	if got := keyfunc.FromHTTPWithValues(r, "", nil).Value(ctxKey{}); got != "ctx" {
		t.Errorf("Value with nil values = %v, want ctx", got)
	}
}

func TestFromHTTPBody(t *testing.T) {
	t.Parallel()
	const body = "0123456789"
	type step struct {
		limit   int64
		wantErr bool // an error wrapping ErrInvalidKey, else the whole body
	}
	tests := []struct {
		name    string
		chunked bool // unknown length: ContentLength -1, short reads
		steps   []step
	}{
		{name: "fits", steps: []step{{10, false}}},
		{name: "fits chunked", chunked: true, steps: []step{{10, false}}},
		{name: "read twice", steps: []step{{64, false}, {64, false}}},
		{name: "too long", steps: []step{{9, true}}},
		{name: "too long chunked", chunked: true, steps: []step{{9, true}}},
		{name: "too long then larger limit", chunked: true, steps: []step{{4, true}, {10, false}}},
		{name: "fits then smaller limit", steps: []step{{10, false}, {5, true}}},
		{name: "zero limit", chunked: true, steps: []step{{0, true}}},
		{name: "negative limit", steps: []step{{-1, true}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest("POST", "/", strings.NewReader(body))
			if tc.chunked {
				r.Body = io.NopCloser(&halfReader{strings.NewReader(body)})
				r.ContentLength = -1
			}
			v := keyfunc.FromHTTP(r, "")
			for i, s := range tc.steps {
				got, err := v.Body(s.limit)
				if s.wantErr {
					if !errors.Is(err, keyfunc.ErrInvalidKey) || got != nil {
						t.Errorf("Body(%d) #%d = %q, %v; want error wrapping ErrInvalidKey", s.limit, i, got, err)
					}
				} else if err != nil || string(got) != body {
					t.Errorf("Body(%d) #%d = %q, %v; want %q", s.limit, i, got, err, body)
				}
			}
			if rest, err := io.ReadAll(r.Body); err != nil || string(rest) != body {
				t.Errorf("handler reads %q, %v; want %q", rest, err, body)
			}
			if err := r.Body.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
}

// halfReader returns short reads, like a network body.
type halfReader struct{ r io.Reader }

func (h *halfReader) Read(p []byte) (int, error) {
	if len(p) > 3 {
		p = p[:3]
	}
	return h.r.Read(p)
}

func TestFromHTTPNoBody(t *testing.T) {
	t.Parallel()
	r := httptest.NewRequest("GET", "/", nil)
	r.Body = nil
	v := keyfunc.FromHTTP(r, "")
	if got, err := v.Body(10); err != nil || len(got) != 0 {
		t.Errorf("Body(10) with nil body = %q, %v; want empty", got, err)
	}
	r = httptest.NewRequest("GET", "/", nil) // http.NoBody
	if got, err := keyfunc.FromHTTP(r, "").Body(10); err != nil || len(got) != 0 {
		t.Errorf("Body(10) with NoBody = %q, %v; want empty", got, err)
	}
	if r.Body != http.NoBody {
		t.Errorf("Body replaced NoBody with %T", r.Body)
	}
}

// TestFromHTTPBodyReadError checks that a read error is reported as is (not
// as a bad key) and that the handler still sees the bytes and the error.
func TestFromHTTPBodyReadError(t *testing.T) {
	t.Parallel()
	errNet := errors.New("connection reset")
	r := httptest.NewRequest("POST", "/", nil)
	r.Body = io.NopCloser(io.MultiReader(strings.NewReader("abc"), errReader{errNet}))
	r.ContentLength = -1
	_, err := keyfunc.FromHTTP(r, "").Body(100)
	if !errors.Is(err, errNet) || errors.Is(err, keyfunc.ErrInvalidKey) {
		t.Errorf("Body error = %v; want one wrapping %v", err, errNet)
	}
	rest, err := io.ReadAll(r.Body)
	if string(rest) != "abc" || !errors.Is(err, errNet) {
		t.Errorf("handler reads %q, %v; want \"abc\", %v", rest, err, errNet)
	}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }
