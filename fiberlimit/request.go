package fiberlimit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/ratekit/ratekit/internal/peeraddr"
	"github.com/ratekit/ratekit/keyfunc"
)

// request is the keyfunc.Request view of a fiber request. fiber's strings
// and byte slices point into fasthttp buffers that are reused once the
// handler returns, so every method returns a copy: keys outlive the
// request in stores and caches.
type request struct{ c *fiber.Ctx }

var (
	_ keyfunc.Request    = request{}
	_ keyfunc.RawQuerier = request{}
)

func (r request) Context() context.Context { return r.c.UserContext() }

func (r request) Method() string { return strings.Clone(r.c.Method()) }

// Route is the path of the matched route: for a route-level middleware the
// route's pattern, for middleware mounted with app.Use or app.Group the
// mount prefix, as fiber has not matched the final route yet.
func (r request) Route() string { return strings.Clone(r.c.Route().Path) }

func (r request) Path() string { return strings.Clone(r.c.Path()) }

func (r request) Header(name string) string {
	return string(r.c.Request().Header.Peek(name))
}

func (r request) Values(name string) []string {
	raw := r.c.Request().Header.PeekAll(name)
	if len(raw) == 0 {
		return nil
	}
	vs := make([]string, len(raw))
	for i, b := range raw {
		vs[i] = string(b)
	}
	return vs
}

func (r request) Query(name string) string {
	return string(r.c.Context().QueryArgs().Peek(name))
}

// RawQuery implements keyfunc.RawQuerier: the query string as sent.
func (r request) RawQuery() string {
	return string(r.c.Request().URI().QueryString())
}

// RemoteAddr is the TCP peer, not c.IP(): fiber's ProxyHeader setting
// would trust a forwarding header from anyone, while keyfunc.ClientIP
// honours them only from trusted proxies.
func (r request) RemoteAddr() string {
	return peeraddr.String(r.c.Context().RemoteAddr())
}

func (r request) Value(key any) any {
	if v := r.c.Locals(key); v != nil {
		return v
	}
	return r.c.UserContext().Value(key)
}

// Body returns a copy of the request body as the handler sees it with
// c.Body(): decoded when Content-Encoding names encodings fiber decodes
// (gzip, deflate, br), the way fiber does. Decoding is bounded: at most
// limit+1 bytes are inflated at each step, so that a small compressed body
// (a "zip bomb") is refused as too large without inflating the rest. A
// body its encoding cannot decode is malformed (400). The raw body is what
// fasthttp already holds, bounded by the app's BodyLimit. The request is
// left untouched: the handler's c.Body() decodes it again.
func (r request) Body(limit int64) ([]byte, error) {
	limit = min(max(limit, 0), math.MaxInt64-1)
	encs, err := contentEncodings(r.c)
	if err != nil {
		return nil, err
	}
	b, decoded, err := decodedBody(r.c.Request().Body(), encs, limit)
	switch {
	case err != nil:
		return nil, err
	case int64(len(b)) > limit:
		return nil, keyfunc.BodyTooLarge(limit)
	case decoded:
		return b, nil // already a buffer of its own
	}
	return bytes.Clone(b), nil
}

// contentEncodings returns the codings of the request's Content-Encoding
// header as fiber's c.Body() reads them: the last field of that exact
// name, split at commas, each trimmed of leading spaces. A field longer
// than maxEncodingField is an error.
func contentEncodings(c *fiber.Ctx) ([]string, error) {
	var v []byte
	c.Request().Header.VisitAll(func(key, value []byte) {
		if string(key) == fiber.HeaderContentEncoding {
			v = value
		}
	})
	if len(v) == 0 {
		return nil, nil
	}
	if len(v) > maxEncodingField {
		return nil, errEncoding
	}
	encs := strings.Split(string(v), ",")
	for i, e := range encs {
		encs[i] = strings.TrimLeft(e, " ")
	}
	return encs, nil
}

// maxEncodingField is the longest Content-Encoding field read: fiber v2
// splits longer ones wrongly (its offsets are bytes), and a view that read
// them otherwise would key a body other than the handler's.
const maxEncodingField = 255

// errEncoding is the error of a body its Content-Encoding cannot decode.
var errEncoding = reasoned{fmt.Errorf("ratekit: fiberlimit: undecodable request body: %w", keyfunc.ErrInvalidKey), "malformed request body encoding"}

// reasoned is a key error with a client-safe reason (keyfunc.Reason).
type reasoned struct {
	error
	reason string
}

func (e reasoned) Unwrap() error  { return e.error }
func (e reasoned) Reason() string { return e.reason }

// decodedBody decodes raw as fiber's c.Body() does for encs, in the order
// listed, stopping at the first coding fiber does not know (whose body is
// then the one decoded so far, or none when such a coding comes first in
// a list of several). Each step inflates at most limit+1 bytes: a longer
// result is too large, even if a later step would shrink it. Decoding uses
// fasthttp's own decoders, as fiber does. decoded reports that body is a
// buffer of its own rather than raw.
func decodedBody(raw []byte, encs []string, limit int64) (body []byte, decoded bool, err error) {
	if len(raw) == 0 {
		return nil, false, nil
	}
	body = raw
	for i, enc := range encs {
		var decode func(io.Writer, []byte) (int, error)
		switch enc {
		case fiber.StrGzip:
			decode = fasthttp.WriteGunzip
		case fiber.StrBr, fiber.StrBrotli:
			decode = fasthttp.WriteUnbrotli
		case fiber.StrDeflate:
			decode = fasthttp.WriteInflate
		default:
			if i == 0 && len(encs) > 1 {
				return nil, false, nil
			}
			return body, i > 0, nil
		}
		w := cappedWriter{max: limit + 1}
		_, err := decode(&w, body)
		switch {
		case w.over:
			return nil, false, keyfunc.BodyTooLarge(limit)
		case err != nil:
			return nil, false, errEncoding
		}
		body = w.b
	}
	return body, true, nil
}

// cappedWriter keeps what is written up to max bytes, and fails a write
// beyond, which stops the decoder writing to it.
type cappedWriter struct {
	b    []byte
	max  int64
	over bool
}

// errCapped stops a decoder at the cap.
var errCapped = errors.New("ratekit: fiberlimit: body longer than the cap")

func (w *cappedWriter) Write(p []byte) (int, error) {
	if room := w.max - int64(len(w.b)); int64(len(p)) > room {
		w.b = append(w.b, p[:room]...)
		w.over = true
		return int(room), errCapped
	}
	w.b = append(w.b, p...)
	return len(p), nil
}
