package keyfunc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// FromHTTP returns the [Request] view of an *http.Request. route is the
// matched route pattern ("/users/:id"), "" when none matched; the view's
// Route is then "", never the path. The net/http, gin and echo adapters
// share it (net/http passes r.Pattern, gin c.FullPath(), echo c.Path()).
//
// Building the view allocates only the view; headers and the query string
// are read in place when a key function asks. Its Body method replaces
// r.Body with a reader that replays the bytes read before the rest of the
// original body (whose Close it keeps), so the handler still reads the
// whole body. Like r itself, the view is not safe for concurrent use.
func FromHTTP(r *http.Request, route string) Request {
	return FromHTTPWithValues(r, route, nil)
}

// Locals looks a key up in a framework's per-request store (gin c.Get,
// echo c.Get). An adapter implements it on a pointer type it already has,
// so that passing it to [FromHTTPWithValues] allocates nothing.
type Locals interface {
	Local(key any) any
}

// LocalsFunc adapts a function to [Locals].
type LocalsFunc func(key any) any

// Local calls f(key).
func (f LocalsFunc) Local(key any) any { return f(key) }

// FromHTTPWithValues is [FromHTTP] with framework locals: the view's Value
// method consults values first and, when that returns nil,
// r.Context().Value. A nil values is allowed.
func FromHTTPWithValues(r *http.Request, route string, values Locals) Request {
	h := new(HTTPRequest)
	h.Reset(r, route, values)
	return h
}

// HTTPRequest is the [Request] view of an *http.Request that [FromHTTP]
// and [FromHTTPWithValues] return, as a type that can be reused: the
// adapters keep views in a pool (see guard.Guard.AdmitHTTP), so that
// building one allocates nothing. Use it through [Request]; a zero
// HTTPRequest must be [HTTPRequest.Reset] before use.
type HTTPRequest struct {
	r      *http.Request
	route  string
	values Locals

	// Body state: buf holds the bytes read so far from orig, the body
	// as it was before the first Body call; eof is set once orig is done.
	orig io.ReadCloser
	buf  []byte
	eof  bool
	read bool
}

// Reset makes h the view of r, with route and values as
// [FromHTTPWithValues] takes them, forgetting all of the request it was
// the view of before; Reset(nil, "", nil) lets go of it. The bytes a
// previous request's Body returned are not reused.
func (h *HTTPRequest) Reset(r *http.Request, route string, values Locals) {
	*h = HTTPRequest{r: r, route: route, values: values}
}

// Context implements [Request].
func (h *HTTPRequest) Context() context.Context { return h.r.Context() }

// Method implements [Request].
func (h *HTTPRequest) Method() string { return h.r.Method }

// RemoteAddr implements [Request].
func (h *HTTPRequest) RemoteAddr() string { return h.r.RemoteAddr }

// Route implements [Request].
func (h *HTTPRequest) Route() string { return h.route }

// Path implements [Request].
func (h *HTTPRequest) Path() string {
	if h.r.URL == nil {
		return ""
	}
	return h.r.URL.Path
}

// Header implements [Request].
func (h *HTTPRequest) Header(name string) string { return h.r.Header.Get(name) }

// Values implements [Request].
func (h *HTTPRequest) Values(name string) []string { return h.r.Header.Values(name) }

// Query implements [Request].
func (h *HTTPRequest) Query(name string) string {
	if h.r.URL == nil {
		return ""
	}
	return lookupQuery(h.r.URL.RawQuery, name)
}

var _ RawQuerier = (*HTTPRequest)(nil)

// RawQuery implements [RawQuerier]: r.URL.RawQuery.
func (h *HTTPRequest) RawQuery() string {
	if h.r.URL == nil {
		return ""
	}
	return h.r.URL.RawQuery
}

// Value implements [Request].
func (h *HTTPRequest) Value(key any) any {
	if h.values != nil {
		if v := h.values.Local(key); v != nil {
			return v
		}
	}
	return h.r.Context().Value(key)
}

// Body implements [Request]: it reads up to limit bytes of the body. A body whose declared length
// exceeds limit is refused without reading; otherwise at most limit+1 bytes
// are read, once, and later calls reuse them. r.Body is read as it is:
// behind a middleware that swaps in a decompressing reader, at most limit+1
// decompressed bytes are produced. A body cut short by http.MaxBytesReader
// is too large as well.
func (h *HTTPRequest) Body(limit int64) ([]byte, error) {
	limit = min(max(limit, 0), math.MaxInt64-1)
	if int64(len(h.buf)) > limit || !h.eof && h.r.ContentLength > limit {
		return nil, BodyTooLarge(limit)
	}
	if h.eof {
		return h.buf[:len(h.buf):len(h.buf)], nil
	}
	if !h.read && !h.open() {
		return nil, nil
	}
	// Read until limit+1 bytes are held or the body ends.
	err := h.fill(limit + 1 - int64(len(h.buf)))
	if h.eof {
		h.r.Body = &replayBody{Reader: bytes.NewReader(h.buf), Closer: h.orig}
	} else {
		h.r.Body = &replayBody{Reader: io.MultiReader(bytes.NewReader(h.buf), h.orig), Closer: h.orig}
	}
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		// http.MaxBytesReader in front cut the body short: too large all
		// the same.
		return nil, withReason(fmt.Errorf("ratekit: keyfunc: reading body: %w: %w", err, ErrBodyTooLarge), "request body too large")
	case err != nil:
		return nil, fmt.Errorf("ratekit: keyfunc: reading body: %w", err)
	case int64(len(h.buf)) > limit:
		return nil, BodyTooLarge(limit)
	}
	return h.buf[:len(h.buf):len(h.buf)], nil
}

// open takes the original body on the first Body call. It reports false
// when there is none to read (nil or http.NoBody), and sizes the buffer for
// a declared length, which Body has checked against its limit.
func (h *HTTPRequest) open() bool {
	h.read = true
	h.orig = h.r.Body
	if h.orig == nil || h.orig == http.NoBody {
		h.eof = true
		return false
	}
	if n := h.r.ContentLength; n > 0 {
		h.buf = make([]byte, 0, min(n+1, 1<<20)) // n <= limit: checked in Body
	}
	return true
}

// fill appends up to want more bytes of the original body to h.buf. It
// stops at want bytes, at the end of the body, which sets h.eof, or at the
// first error, which it returns; a body that returns no bytes 100 times in
// a row without an error fails with io.ErrNoProgress.
func (h *HTTPRequest) fill(want int64) error {
	var err error
	for zero := 0; want > 0 && err == nil; {
		if len(h.buf) == cap(h.buf) {
			h.buf = slices.Grow(h.buf, int(min(want, max(int64(cap(h.buf)), 512))))
		}
		room := h.buf[len(h.buf):cap(h.buf)]
		if int64(len(room)) > want {
			room = room[:want]
		}
		var n int
		n, err = h.orig.Read(room)
		h.buf = h.buf[:len(h.buf)+n]
		want -= int64(n)
		if n > 0 {
			zero = 0
		} else if zero++; zero >= 100 && err == nil {
			err = io.ErrNoProgress
		}
	}
	if err == io.EOF {
		h.eof = true
		return nil
	}
	return err
}

// replayBody is the body left for the handler: the bytes already read,
// then the rest of the original body, which it also closes.
type replayBody struct {
	io.Reader
	io.Closer
}

// lookupQuery returns the first value of name in a URL-encoded query, as
// url.ParseQuery followed by Values.Get would, without building the map.
func lookupQuery(q, name string) string {
	for q != "" {
		var pair string
		pair, q, _ = strings.Cut(q, "&")
		if pair == "" || strings.IndexByte(pair, ';') >= 0 {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		if k != name {
			if strings.IndexByte(k, '%') < 0 && strings.IndexByte(k, '+') < 0 {
				continue
			}
			uk, err := url.QueryUnescape(k)
			if err != nil || uk != name {
				continue
			}
		}
		uv, err := url.QueryUnescape(v)
		if err != nil {
			continue
		}
		return uv
	}
	return ""
}
