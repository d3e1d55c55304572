package keyfunc

import (
	"context"
	"errors"
	"fmt"
)

// ErrNoKey reports that a request carries no key for this limiter, for
// example an anonymous user when the key is the user ID. It is not a
// malformed request: the middleware's no-key policy decides what happens
// (by default the limiter is skipped for that request).
var ErrNoKey = errors.New("ratekit: keyfunc: no key")

// ErrInvalidKey reports a key source that is present but malformed, such as
// an unparseable phone number or an oversized body. Adapters answer it with
// 400 Bad Request (gRPC: InvalidArgument), or 413 Content Too Large when it
// is [ErrBodyTooLarge]. Key functions wrap it with detail.
var ErrInvalidKey = errors.New("ratekit: keyfunc: invalid key")

// ErrBodyTooLarge reports a request body longer than a key function may
// read (see [BodyTooLarge]). It wraps [ErrInvalidKey]: the key source is
// malformed, but HTTP adapters answer it with 413 Content Too Large rather
// than 400 (gRPC: InvalidArgument all the same).
var ErrBodyTooLarge = fmt.Errorf("ratekit: keyfunc: request body too large: %w", ErrInvalidKey)

// Func turns a request into the key a limiter counts under. It returns
// [ErrNoKey] when the request has no key, and an error wrapping
// [ErrInvalidKey] (or any other error) when the key source is malformed.
// The Funcs in this package are safe for concurrent use.
type Func func(r Request) (string, error)

// Request is the framework-neutral view of an incoming request that key
// functions read. ratekit's adapters and [FromHTTP] implement it; outside
// implementations may need changes before v1, as methods may be added.
//
// A Request is valid only during the call it is passed to (a key, skip or
// cost function): the adapters reuse their views for later requests. Keep
// what you need of it (strings are safe to keep), not the Request.
type Request interface {
	// Context is the request's context.
	Context() context.Context
	// Method is the HTTP method; "POST" for gRPC.
	Method() string
	// Route is the route pattern ("/users/:id") when one matched, else
	// ""; the full method name for gRPC.
	Route() string
	// Path is the request path; the full method name for gRPC.
	Path() string
	// Header returns the first value of a header (gRPC: metadata).
	Header(name string) string
	// Values returns all values of a header (gRPC: metadata).
	Values(name string) []string
	// Query returns the first value of a query parameter; "" for gRPC.
	Query(name string) string
	// RemoteAddr is the peer address: "ip:port", "[ipv6]:port" or a
	// bare address.
	RemoteAddr() string
	// Value looks up framework locals (gin c.Get, echo c.Get, fiber
	// c.Locals) and then the request context.
	Value(key any) any
	// Body reads at most max bytes of the request body, as the handler
	// will see it (decoded, where the framework decodes the
	// Content-Encoding itself), and leaves the whole body readable for
	// the handler. A body longer than max is an error wrapping
	// [ErrBodyTooLarge] (and so [ErrInvalidKey]), such as [BodyTooLarge]
	// returns; no more than max+1 bytes are read or decoded to find out.
	// Repeated calls return the same bytes, which callers must not modify.
	Body(max int64) ([]byte, error)
}

// RawQuerier is an optional interface of a [Request]: RawQuery returns the
// request's whole query string as sent, still URL-encoded ("" for none),
// for key functions that must see every parameter rather than the first
// value of one, such as those of package keyfunc/personal, which refuse a
// request whose parameters name different values. The views of
// ratekit's HTTP adapters and [FromHTTP] implement it; a key function
// that finds a view without it falls back to [Request.Query].
type RawQuerier interface {
	RawQuery() string
}
