package nethttp

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/keyfunc"
)

// Transport returns an http.RoundTripper that throttles the requests an
// app sends through base (http.DefaultTransport when nil), such as calls
// to an SMS provider that allows so many per second across the whole
// fleet: each request waits with [core.Limiter.WaitN] until it fits l,
// and every limit added with guard.WithAlso, then goes to base unchanged.
// Every limit holds when the request goes to base: no unit is kept while
// another limit is waited for (see [guard.Guard.Wait]). On a
// redisstore.Store every instance's requests wait for the same windows.
//
//	client := &http.Client{Transport: nethttp.Transport(provider, nil)}
//
// The key is the request's host by default: URL.Host lowercased, without
// a trailing dot or the scheme's default port, so "API.example.com:443"
// and "api.example.com" are one key under https. guard.WithKey replaces
// it; key, skip and cost functions see the request through
// keyfunc.FromHTTP with an empty route and peer address, and a body read
// from a copy made by r.GetBody (a key function reading the body of a
// request without GetBody fails): the request is never modified, and
// nothing is cloned. The guard options that apply are WithKey, WithBlock,
// WithSkip, WithCost, WithAlso, WithNoKey, WithKeyError, WithDryRun and
// WithObserver; the answer options (headers, body) have no effect.
//
// A request waits under its own context. It fails, without reaching base
// and with its body closed, when the wait would end after the context's
// deadline (an error wrapping context.DeadlineExceeded, returned at once),
// when the context ends (its error), when its cost can never fit
// (core.ErrInvalidCost), when the block predicate refuses it
// (guard.ErrBlocked), or when its key source is malformed; see
// [guard.Guard.Wait]. Every request that went to base counts, whatever
// its answer.
//
// The RoundTripper is safe for concurrent use, and its
// CloseIdleConnections reaches base. Transport panics if l is nil, on an
// option of this package's middleware, and on what outgoing requests
// cannot honour (guard.Guard.CheckOutbound: guard.WithCountIf,
// guard.WithResetIf, an InFlight policy), naming it: programmer errors
// caught at start-up.
func Transport(l *core.Limiter, base http.RoundTripper, opts ...guard.Option) http.RoundTripper {
	if l == nil {
		panic("ratekit: nethttp: Transport: nil *core.Limiter")
	}
	if base == nil {
		base = http.DefaultTransport
	}
	g := guard.New(l, append([]guard.Option{guard.WithKey(hostKey)}, opts...)...)
	g.ReadNatives("nethttp.Transport")
	if err := g.CheckOutbound(); err != nil {
		panic("ratekit: nethttp: Transport: " + strings.TrimPrefix(err.Error(), "ratekit: "))
	}
	return &transport{g: g, base: base}
}

// transport is the RoundTripper of [Transport].
type transport struct {
	g    *guard.Guard
	base http.RoundTripper
}

// RoundTrip waits until r fits the limit, then sends it with the base
// RoundTripper.
func (t *transport) RoundTrip(r *http.Request) (*http.Response, error) {
	v := t.g.Wait(r.Context(), &outgoing{Request: keyfunc.FromHTTP(r, ""), r: r})
	if !v.Proceed() {
		// A RoundTripper must close the body, even on errors.
		if r.Body != nil {
			_ = r.Body.Close()
		}
		return nil, &refusedError{v.Err}
	}
	return t.base.RoundTrip(r)
}

// refusedError is the error of a request the Transport refused: its
// cause, said with "ratekit:" once.
type refusedError struct{ err error }

func (e *refusedError) Error() string {
	return "ratekit: nethttp: Transport: " + strings.TrimPrefix(e.err.Error(), "ratekit: ")
}

func (e *refusedError) Unwrap() error { return e.err }

// CloseIdleConnections closes the idle connections of the base
// RoundTripper, if it has any, for http.Client.CloseIdleConnections.
func (t *transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// outgoing is the keyfunc.Request view of an outgoing request: that of
// keyfunc.FromHTTP, with a body read from a copy.
type outgoing struct {
	keyfunc.Request
	r   *http.Request
	buf []byte // the whole body, once read
	eof bool
}

// errNoGetBody is what a key function reading the body of an outgoing
// request without GetBody gets.
var errNoGetBody = errors.New("ratekit: nethttp: Transport: the request has a body but no GetBody, so a key function cannot read it without consuming it")

// Body reads at most limit bytes of a copy of the body from r.GetBody,
// leaving r.Body untouched.
func (o *outgoing) Body(limit int64) ([]byte, error) {
	limit = max(limit, 0)
	switch {
	case o.eof && int64(len(o.buf)) <= limit:
		return o.buf[:len(o.buf):len(o.buf)], nil
	case o.eof || o.r.ContentLength > limit:
		return nil, keyfunc.BodyTooLarge(limit)
	case o.r.Body == nil || o.r.Body == http.NoBody:
		o.eof = true
		return nil, nil
	case o.r.GetBody == nil:
		return nil, errNoGetBody
	}
	rc, err := o.r.GetBody()
	if err != nil {
		return nil, fmt.Errorf("ratekit: nethttp: Transport: GetBody: %w", err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, limit+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("ratekit: nethttp: Transport: reading a copy of the body: %w", err)
	case int64(len(b)) > limit:
		return nil, keyfunc.BodyTooLarge(limit)
	}
	o.buf, o.eof = b, true
	return o.buf[:len(o.buf):len(o.buf)], nil
}

// hostKey is the default key of [Transport]: the host of an outgoing
// request, lowercased, without a trailing dot or the scheme's default
// port.
func hostKey(r keyfunc.Request) (string, error) {
	o, ok := r.(*outgoing)
	if !ok {
		return "", keyfunc.ErrNoKey
	}
	u := o.r.URL
	if u == nil || u.Host == "" {
		u = &url.URL{Scheme: "http", Host: o.r.Host}
		if o.r.URL != nil && o.r.URL.Scheme != "" {
			u.Scheme = o.r.URL.Scheme
		}
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if host == "" {
		return "", keyfunc.ErrNoKey
	}
	port := u.Port()
	switch scheme := strings.ToLower(u.Scheme); {
	case port == "",
		port == "80" && (scheme == "http" || scheme == "ws"),
		port == "443" && (scheme == "https" || scheme == "wss"):
		return host, nil
	}
	return net.JoinHostPort(host, port), nil
}
