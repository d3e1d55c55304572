package nethttp

import (
	"bufio"
	"io"
	"net"
	"net/http"
)

// statusWriter records the final status the client gets, for
// guard.Verdict.Finish:
//   - 1xx informational responses (100 Continue, 103 Early Hints) are not
//     final: they pass through unrecorded;
//   - 101 Switching Protocols is final;
//   - the first final status written is the one the client gets: net/http
//     ignores later WriteHeader calls, and so does the record;
//   - Write, ReadFrom and Flush before any final status mean 200;
//   - a successful Hijack before any final status counts as 101: the
//     handler speaks on the raw connection, typically after a protocol
//     switch, where ratekit cannot see what it writes. A status written
//     before the hijack is kept.
//
// The writer the handler sees ([wrap]) has exactly the optional
// interfaces of the one it wraps among http.Flusher, http.Hijacker,
// io.ReaderFrom and http.Pusher, and unwraps for http.ResponseController.
type statusWriter struct {
	w      http.ResponseWriter
	status int
}

func (s *statusWriter) Header() http.Header { return s.w.Header() }

func (s *statusWriter) WriteHeader(code int) {
	s.w.WriteHeader(code) // net/http panics on an invalid code: nothing to record
	if s.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		s.status = code
	}
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.w.Write(b)
}

// Unwrap returns the wrapped writer, for http.ResponseController (read and
// write deadlines, full duplex, and whatever the wrapped writer offers).
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.w }

// Status is the final status the client got; 200 if the handler wrote
// nothing (net/http then answers 200).
func (s *statusWriter) Status() int {
	if s.status == 0 {
		return http.StatusOK
	}
	return s.status
}

// The optional methods, exposed only by the combinations below whose
// wrapped writer has them.

func (s *statusWriter) flush() {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	s.w.(http.Flusher).Flush()
}

// flushError is Flush reporting the wrapped writer's error, as
// http.ResponseController.Flush does.
func (s *statusWriter) flushError() error {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return http.NewResponseController(s.w).Flush()
}

func (s *statusWriter) hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := s.w.(http.Hijacker).Hijack()
	if err == nil && s.status == 0 {
		s.status = http.StatusSwitchingProtocols
	}
	return c, rw, err
}

func (s *statusWriter) readFrom(r io.Reader) (int64, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.w.(io.ReaderFrom).ReadFrom(r)
}

func (s *statusWriter) push(target string, opts *http.PushOptions) error {
	return s.w.(http.Pusher).Push(target, opts)
}

// Optional interfaces of a writer, as bits.
const (
	canFlush = 1 << iota
	canHijack
	canReadFrom
	canPush
)

// wrap returns the writer the handler sees, with exactly w's optional
// interfaces, and the recorder behind it. The combinations are structs of
// one pointer, so that returning them as an http.ResponseWriter does not
// allocate.
func wrap(w http.ResponseWriter) (http.ResponseWriter, *statusWriter) {
	s := &statusWriter{w: w}
	var k int
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
	return combinations[k](s), s
}

// combinations holds, for each set of optional interfaces (the can* bits),
// the function that wraps a recorder in the combination with exactly
// those.
var combinations = [...]func(*statusWriter) http.ResponseWriter{
	0:                                  func(s *statusWriter) http.ResponseWriter { return s },
	canFlush:                           func(s *statusWriter) http.ResponseWriter { return swF{s} },
	canHijack:                          func(s *statusWriter) http.ResponseWriter { return swH{s} },
	canFlush | canHijack:               func(s *statusWriter) http.ResponseWriter { return swFH{s} },
	canReadFrom:                        func(s *statusWriter) http.ResponseWriter { return swR{s} },
	canFlush | canReadFrom:             func(s *statusWriter) http.ResponseWriter { return swFR{s} },
	canHijack | canReadFrom:            func(s *statusWriter) http.ResponseWriter { return swHR{s} },
	canFlush | canHijack | canReadFrom: func(s *statusWriter) http.ResponseWriter { return swFHR{s} },
	canPush:                            func(s *statusWriter) http.ResponseWriter { return swP{s} },
	canFlush | canPush:                 func(s *statusWriter) http.ResponseWriter { return swFP{s} },
	canHijack | canPush:                func(s *statusWriter) http.ResponseWriter { return swHP{s} },
	canFlush | canHijack | canPush:     func(s *statusWriter) http.ResponseWriter { return swFHP{s} },
	canReadFrom | canPush:              func(s *statusWriter) http.ResponseWriter { return swRP{s} },
	canFlush | canReadFrom | canPush:   func(s *statusWriter) http.ResponseWriter { return swFRP{s} },
	canHijack | canReadFrom | canPush:  func(s *statusWriter) http.ResponseWriter { return swHRP{s} },
	canFlush | canHijack | canReadFrom | canPush: func(s *statusWriter) http.ResponseWriter { return swFHRP{s} },
}

// The combinations: F http.Flusher (with FlushError for
// http.ResponseController), H http.Hijacker, R io.ReaderFrom, P
// http.Pusher.
type (
	swF    struct{ *statusWriter }
	swH    struct{ *statusWriter }
	swFH   struct{ *statusWriter }
	swR    struct{ *statusWriter }
	swFR   struct{ *statusWriter }
	swHR   struct{ *statusWriter }
	swFHR  struct{ *statusWriter }
	swP    struct{ *statusWriter }
	swFP   struct{ *statusWriter }
	swHP   struct{ *statusWriter }
	swFHP  struct{ *statusWriter }
	swRP   struct{ *statusWriter }
	swFRP  struct{ *statusWriter }
	swHRP  struct{ *statusWriter }
	swFHRP struct{ *statusWriter }
)

func (w swF) Flush()            { w.flush() }
func (w swF) FlushError() error { return w.flushError() }

func (w swH) Hijack() (net.Conn, *bufio.ReadWriter, error) { return w.hijack() }

func (w swFH) Flush()                                       { w.flush() }
func (w swFH) FlushError() error                            { return w.flushError() }
func (w swFH) Hijack() (net.Conn, *bufio.ReadWriter, error) { return w.hijack() }

func (w swR) ReadFrom(r io.Reader) (int64, error) { return w.readFrom(r) }

func (w swFR) Flush()                              { w.flush() }
func (w swFR) FlushError() error                   { return w.flushError() }
func (w swFR) ReadFrom(r io.Reader) (int64, error) { return w.readFrom(r) }

func (w swHR) Hijack() (net.Conn, *bufio.ReadWriter, error) { return w.hijack() }
func (w swHR) ReadFrom(r io.Reader) (int64, error)          { return w.readFrom(r) }

func (w swFHR) Flush()                                       { w.flush() }
func (w swFHR) FlushError() error                            { return w.flushError() }
func (w swFHR) Hijack() (net.Conn, *bufio.ReadWriter, error) { return w.hijack() }
func (w swFHR) ReadFrom(r io.Reader) (int64, error)          { return w.readFrom(r) }

func (w swP) Push(target string, opts *http.PushOptions) error { return w.push(target, opts) }

func (w swFP) Flush()                                           { w.flush() }
func (w swFP) FlushError() error                                { return w.flushError() }
func (w swFP) Push(target string, opts *http.PushOptions) error { return w.push(target, opts) }

func (w swHP) Hijack() (net.Conn, *bufio.ReadWriter, error)     { return w.hijack() }
func (w swHP) Push(target string, opts *http.PushOptions) error { return w.push(target, opts) }

func (w swFHP) Flush()                                           { w.flush() }
func (w swFHP) FlushError() error                                { return w.flushError() }
func (w swFHP) Hijack() (net.Conn, *bufio.ReadWriter, error)     { return w.hijack() }
func (w swFHP) Push(target string, opts *http.PushOptions) error { return w.push(target, opts) }

func (w swRP) ReadFrom(r io.Reader) (int64, error)              { return w.readFrom(r) }
func (w swRP) Push(target string, opts *http.PushOptions) error { return w.push(target, opts) }

func (w swFRP) Flush()                                           { w.flush() }
func (w swFRP) FlushError() error                                { return w.flushError() }
func (w swFRP) ReadFrom(r io.Reader) (int64, error)              { return w.readFrom(r) }
func (w swFRP) Push(target string, opts *http.PushOptions) error { return w.push(target, opts) }

func (w swHRP) Hijack() (net.Conn, *bufio.ReadWriter, error)     { return w.hijack() }
func (w swHRP) ReadFrom(r io.Reader) (int64, error)              { return w.readFrom(r) }
func (w swHRP) Push(target string, opts *http.PushOptions) error { return w.push(target, opts) }

func (w swFHRP) Flush()                                           { w.flush() }
func (w swFHRP) FlushError() error                                { return w.flushError() }
func (w swFHRP) Hijack() (net.Conn, *bufio.ReadWriter, error)     { return w.hijack() }
func (w swFHRP) ReadFrom(r io.Reader) (int64, error)              { return w.readFrom(r) }
func (w swFHRP) Push(target string, opts *http.PushOptions) error { return w.push(target, opts) }
