package keyfunc_test

import (
	"bytes"
	"compress/gzip"
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
		{"Route without pattern", keyfunc.FromHTTP(r, "").Route(), ""},
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
					if !errors.Is(err, keyfunc.ErrBodyTooLarge) || !errors.Is(err, keyfunc.ErrInvalidKey) || got != nil {
						t.Errorf("Body(%d) #%d = %q, %v; want error wrapping ErrBodyTooLarge and ErrInvalidKey", s.limit, i, got, err)
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

// gzipBomb returns a gzip stream of n MiB of spaces (one member per MiB,
// about 1 KiB each).
func gzipBomb(t *testing.T, mib int) []byte {
	t.Helper()
	var member bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&member, gzip.BestCompression)
	if _, err := zw.Write(bytes.Repeat([]byte(" "), 1<<20)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return bytes.Repeat(member.Bytes(), mib)
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// TestFromHTTPBodyDecompressed: behind a middleware that swaps r.Body for
// a decompressing reader, Body inflates at most limit+1 bytes of a gzip
// bomb and says the body is too large; a small compressed body is read
// decoded and stays whole for the handler.
func TestFromHTTPBodyDecompressed(t *testing.T) {
	t.Parallel()
	bomb := gzipBomb(t, 64)
	var small bytes.Buffer
	zw := gzip.NewWriter(&small)
	_, _ = io.WriteString(zw, `{"phone":"13800138000"}`)
	_ = zw.Close()
	tests := []struct {
		name    string
		body    []byte
		limit   int64
		want    string // the decoded body; "" means too large
		wantMax int64  // most bytes the decompressor may produce
	}{
		{"bomb, 64 KiB limit", bomb, 64 << 10, "", 64<<10 + 1},
		{"bomb, 1 KiB limit", bomb, 1 << 10, "", 1<<10 + 1},
		{"bomb, zero limit", bomb, 0, "", 1},
		{"small body", small.Bytes(), 64 << 10, `{"phone":"13800138000"}`, 64<<10 + 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest("POST", "/", bytes.NewReader(tc.body))
			r.Header.Set("Content-Encoding", "gzip")
			// What a decompressing middleware does: swap r.Body, forget
			// the length.
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				t.Fatal(err)
			}
			cr := &countingReader{r: zr}
			r.Body, r.ContentLength = io.NopCloser(cr), -1
			r.Header.Del("Content-Encoding")

			got, err := keyfunc.FromHTTP(r, "").Body(tc.limit)
			if cr.n > tc.wantMax {
				t.Errorf("Body(%d) inflated %d bytes, want at most %d", tc.limit, cr.n, tc.wantMax)
			}
			if tc.want == "" {
				if !errors.Is(err, keyfunc.ErrBodyTooLarge) || keyfunc.Reason(err) != "request body too large" {
					t.Errorf("Body(%d) = %d bytes, %v; want ErrBodyTooLarge", tc.limit, len(got), err)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("Body(%d) = %q, %v; want %q", tc.limit, got, err, tc.want)
			}
			if rest, err := io.ReadAll(r.Body); err != nil || string(rest) != tc.want {
				t.Errorf("handler reads %q, %v; want %q", rest, err, tc.want)
			}
		})
	}
}

// TestFromHTTPMaxBytes: a body cut short by http.MaxBytesReader is too
// large, not a read error.
func TestFromHTTPMaxBytes(t *testing.T) {
	t.Parallel()
	r := httptest.NewRequest("POST", "/", strings.NewReader("0123456789"))
	r.Body = http.MaxBytesReader(httptest.NewRecorder(), r.Body, 4)
	r.ContentLength = -1
	_, err := keyfunc.FromHTTP(r, "").Body(100)
	var mbe *http.MaxBytesError
	if !errors.Is(err, keyfunc.ErrBodyTooLarge) || !errors.As(err, &mbe) || keyfunc.Reason(err) != "request body too large" {
		t.Errorf("Body(100) behind MaxBytesReader(4) = %v; want ErrBodyTooLarge wrapping the *http.MaxBytesError, reason \"request body too large\"", err)
	}
}
