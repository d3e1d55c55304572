package nethttp

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
)

// full is a writer with every optional interface.
type full struct{ http.ResponseWriter }

func (full) Flush()                                       {}
func (full) Hijack() (net.Conn, *bufio.ReadWriter, error) { return nil, nil, nil }
func (full) ReadFrom(io.Reader) (int64, error)            { return 0, nil }
func (full) Push(string, *http.PushOptions) error         { return nil }

// TestWrapCombinations: every combination of optional interfaces maps to
// a writer with exactly those, that unwraps to the original.
func TestWrapCombinations(t *testing.T) {
	for k := range 16 {
		// Hide the interfaces not in k behind an anonymous struct.
		var w http.ResponseWriter = full{}
		type (
			f  = http.Flusher
			h  = http.Hijacker
			r  = io.ReaderFrom
			p  = http.Pusher
			w0 = http.ResponseWriter
		)
		x := full{}
		switch k {
		case 0:
			w = struct{ w0 }{x}
		case canFlush:
			w = struct {
				w0
				f
			}{x, x}
		case canHijack:
			w = struct {
				w0
				h
			}{x, x}
		case canFlush | canHijack:
			w = struct {
				w0
				f
				h
			}{x, x, x}
		case canReadFrom:
			w = struct {
				w0
				r
			}{x, x}
		case canFlush | canReadFrom:
			w = struct {
				w0
				f
				r
			}{x, x, x}
		case canHijack | canReadFrom:
			w = struct {
				w0
				h
				r
			}{x, x, x}
		case canFlush | canHijack | canReadFrom:
			w = struct {
				w0
				f
				h
				r
			}{x, x, x, x}
		case canPush:
			w = struct {
				w0
				p
			}{x, x}
		case canFlush | canPush:
			w = struct {
				w0
				f
				p
			}{x, x, x}
		case canHijack | canPush:
			w = struct {
				w0
				h
				p
			}{x, x, x}
		case canFlush | canHijack | canPush:
			w = struct {
				w0
				f
				h
				p
			}{x, x, x, x}
		case canReadFrom | canPush:
			w = struct {
				w0
				r
				p
			}{x, x, x}
		case canFlush | canReadFrom | canPush:
			w = struct {
				w0
				f
				r
				p
			}{x, x, x, x}
		case canHijack | canReadFrom | canPush:
			w = struct {
				w0
				h
				r
				p
			}{x, x, x, x}
		}
		if got := kind(w); got != k {
			t.Fatalf("test writer %d has kind %d", k, got)
		}
		rw, sw := wrap(w)
		if got := kind(rw); got != k {
			t.Errorf("wrap(writer with %04b) has %04b", k, got)
		}
		if u, ok := rw.(interface{ Unwrap() http.ResponseWriter }); !ok || u.Unwrap() != w || sw.Unwrap() != w {
			t.Errorf("wrap(writer with %04b) does not unwrap to it", k)
		}
	}
}

func kind(w http.ResponseWriter) int {
	k := 0
	if _, ok := w.(http.Flusher); ok {
		k |= canFlush
	}
	if _, ok := w.(http.Hijacker); ok {
		k |= canHijack
	}
	if _, ok := w.(io.ReaderFrom); ok {
		k |= canReadFrom
	}
	if _, ok := w.(http.Pusher); ok {
		k |= canPush
	}
	return k
}
