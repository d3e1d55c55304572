// Package adaptertest is the conformance suite every ratekit HTTP adapter
// passes: the same table of HTTP cases, served through a real loopback
// listener, against nethttp, ginlimit, echolimit and fiberlimit.
//
// An adapter's test calls [Run] with a newServer function that builds a
// server for one case: it passes [Options.GuardOptions] to the adapter
// (every adapter takes guard options as they are) plus its native deny
// handler when asked, mounts the middleware in front of the suite's
// handler on [Path] for GET and POST, serves it on 127.0.0.1 and returns
// the base URL. The handler reads the whole request body (as the framework
// gives it: fiber's c.Body() decodes a Content-Encoding) and answers as
// [ReplyTo] says, panicking when [Reply.Panic] is set.
//
// Every server puts the framework's recovery middleware in front of the
// limiter, answering a panic with 500 (net/http: [Recover]); and, when
// [Options.Decompress] is set and the framework does not decode request
// bodies itself, a middleware that does ([Gunzip]).
//
// [RunOneLiners] checks the LimitBy one-liners of every adapter, gRPC's
// included: that each exists with the signature of [OneLiners], keys by
// what it says, is a limit of its own on every store (memory, Redis, the
// one UseStore gives every one-liner of a process), and panics at
// construction naming the field.
package adaptertest

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/keyfunc"
)

// Path is the path the suite's handler is served on, behind the
// middleware, for GET and POST.
const Path = "/r"

// Options describes the middleware of one case in neutral terms. Nil and
// false fields mean "do not pass the option": the adapter's default.
type Options struct {
	// Key is passed to WithKey.
	Key keyfunc.Func
	// Skip is passed to WithSkip.
	Skip func(keyfunc.Request) bool
	// Block is passed to WithBlock.
	Block func(keyfunc.Request) bool
	// Cost is passed to WithCost.
	Cost func(keyfunc.Request) int64
	// CountIf is passed to WithCountIf.
	CountIf func(status int) bool
	// ResetIf is passed to WithResetIf.
	ResetIf func(status int) bool
	// Headers is passed to WithHeaders.
	Headers *guard.HeaderStyle
	// Body is passed to WithBody.
	Body *guard.BodyStyle
	// NoKey is passed to WithNoKey.
	NoKey *guard.NoKeyAction
	// KeyError is passed to WithKeyError.
	KeyError *guard.KeyErrorAction
	// DryRun, when set, passes WithDryRun(true).
	DryRun bool
	// Observer is passed to WithObserver.
	Observer core.Observer
	// Also is passed to WithAlso, one option per element, in order.
	Also []Also

	// DenyHandler asks for the adapter's native deny handler, answering
	// with [DenyReply] the framework's way.
	DenyHandler bool
	// ChallengeHandler asks for the adapter's native challenge handler
	// (WithChallengeHandler), answering with [ChallengeReply] the
	// framework's way.
	ChallengeHandler bool
	// Decompress asks for request bodies with Content-Encoding: gzip to
	// be decoded before the limiter, as a decompressing middleware does:
	// net/http, gin and echo servers wrap their handler in [Gunzip];
	// fiber decodes by itself (c.Body()) and ignores it.
	Decompress bool
	// AnyMethod asks for the route on [Path] to be registered for every
	// method the framework can register at once, as one route: net/http
	// a ServeMux pattern without a method (it is so by default: any
	// method, made-up ones included), gin Any, echo Any, fiber All.
	// Otherwise it is registered for GET and POST (net/http: for any
	// method all the same).
	AnyMethod bool
	// Outer, when set, is a second middleware of the adapter on the same
	// route, in front of (outside) the case's own: Outer.Limiter with the
	// guard options of Outer.Options (whose other fields are ignored).
	Outer *Outer
}

// Outer is a middleware stacked in front of a case's own (Options.Outer).
type Outer struct {
	Limiter *core.Limiter
	Options Options
}

// Also is one limit added with WithAlso: Limiter keyed by Key.
type Also struct {
	Limiter *core.Limiter
	Key     keyfunc.Func
}

// GuardOptions translates the neutral fields of o into guard options,
// which every adapter takes as they are. o.DenyHandler and
// o.ChallengeHandler are the adapter's to translate.
func (o Options) GuardOptions() []guard.Option {
	var opts []guard.Option
	if o.Key != nil {
		opts = append(opts, guard.WithKey(o.Key))
	}
	if o.Skip != nil {
		opts = append(opts, guard.WithSkip(o.Skip))
	}
	if o.Block != nil {
		opts = append(opts, guard.WithBlock(o.Block))
	}
	if o.Cost != nil {
		opts = append(opts, guard.WithCost(o.Cost))
	}
	if o.CountIf != nil {
		opts = append(opts, guard.WithCountIf(o.CountIf))
	}
	if o.ResetIf != nil {
		opts = append(opts, guard.WithResetIf(o.ResetIf))
	}
	if o.Headers != nil {
		opts = append(opts, guard.WithHeaders(*o.Headers))
	}
	if o.Body != nil {
		opts = append(opts, guard.WithBody(*o.Body))
	}
	if o.NoKey != nil {
		opts = append(opts, guard.WithNoKey(*o.NoKey))
	}
	if o.KeyError != nil {
		opts = append(opts, guard.WithKeyError(*o.KeyError))
	}
	if o.DryRun {
		opts = append(opts, guard.WithDryRun(true))
	}
	if o.Observer != nil {
		opts = append(opts, guard.WithObserver(o.Observer))
	}
	for _, a := range o.Also {
		opts = append(opts, guard.WithAlso(a.Limiter, a.Key))
	}
	return opts
}

// Reply is how the suite's handler answers a request.
type Reply struct {
	// Status is the ?status= query parameter; 200 by default.
	Status int
	// Error says whether to answer through the framework's error return
	// where it has one (echo, fiber). net/http and gin have none and
	// write Status as usual.
	Error ErrorKind
	// Body is the text to write: "ok len=N\n", where N is the length of
	// the request body the handler read.
	Body string
	// Panic, when not nil, is the value the handler panics with instead
	// of answering: ?panic=value panics with [ErrPanic], ?panic=abort
	// with http.ErrAbortHandler.
	Panic any
}

// ReplyTo says how the suite's handler answers a request with the given
// query lookup, after it read body in full. With ?hold=name it first
// waits until the case that made the gate of that name opens it, so that
// the request stays in flight (the gate opens by itself when the case
// ends).
func ReplyTo(query func(name string) string, body []byte) Reply {
	if name := query("hold"); name != "" {
		if g, ok := gates.Load(name); ok {
			g.(*gate).arrived <- struct{}{}
			<-g.(*gate).open
		}
	}
	rep := Reply{Status: http.StatusOK, Body: "ok len=" + strconv.Itoa(len(body)) + "\n"}
	if s, err := strconv.Atoi(query("status")); err == nil && s >= 200 && s <= 599 {
		rep.Status = s
	}
	switch query("return_error") {
	case "1":
		rep.Error = FrameworkError
	case "plain":
		rep.Error, rep.Status = PlainError, http.StatusInternalServerError
	}
	switch query("panic") {
	case "value":
		rep.Panic = ErrPanic
	case "abort":
		rep.Panic = http.ErrAbortHandler
	}
	return rep
}

// gates holds the gates of ?hold=name requests, by name.
var gates sync.Map

// gate keeps ?hold=<name> requests in the handler until it opens.
type gate struct {
	name    string
	arrived chan struct{} // a request reached the handler
	open    chan struct{} // closed to let them go on
	once    sync.Once
}

var gateSeq atomic.Int64

// newGate registers a gate for the case t; it opens when t ends, if not
// before.
func newGate(t interface{ Cleanup(func()) }) *gate {
	g := &gate{name: "g" + strconv.FormatInt(gateSeq.Add(1), 10), arrived: make(chan struct{}, 64), open: make(chan struct{})}
	gates.Store(g.name, g)
	t.Cleanup(func() {
		g.release()
		gates.Delete(g.name)
	})
	return g
}

// release lets every held request go on.
func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

// ErrPanic is the value the handler panics with for ?panic=value.
var ErrPanic = errors.New("adaptertest: handler panic")

// Recover is the recovery middleware of the net/http servers: it answers
// a panic with 500, as recovery middleware does, except for
// http.ErrAbortHandler, which it lets go on so that net/http aborts the
// response.
func Recover(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler { //nolint:errorlint // the sentinel itself is the panic value
					panic(p)
				}
				w.WriteHeader(http.StatusInternalServerError)
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// Gunzip is the decompressing middleware of the net/http, gin and echo
// servers under [Options.Decompress]: it swaps the body of a request with
// Content-Encoding: gzip for a gzip reader, with no bound of its own, as
// such middleware does, and drops the header and the length.
func Gunzip(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, "bad gzip body", http.StatusBadRequest)
				return
			}
			r.Body = struct {
				io.Reader
				io.Closer
			}{zr, r.Body}
			r.ContentLength = -1
			r.Header.Del("Content-Encoding")
			r.Header.Del("Content-Length")
		}
		next.ServeHTTP(w, r)
	})
}

// ErrorKind says how the suite's handler answers.
type ErrorKind uint8

const (
	// NoError means: write Status and Body.
	NoError ErrorKind = iota
	// FrameworkError (?return_error=1) means: return the framework's
	// HTTP error with Status (echo: echo.NewHTTPError(Status); fiber:
	// fiber.NewError(Status)).
	FrameworkError
	// PlainError (?return_error=plain) means: return a plain error, which
	// the framework answers with 500; Status is 500.
	PlainError
)

// ErrPlain is the error the handler returns for [PlainError].
var ErrPlain = errors.New("adaptertest: plain handler error")

// DenyReply is what the adapter's native deny handler answers when
// Options.DenyHandler is set: status 429 and this body, written the
// framework's way.
func DenyReply(v *guard.Verdict) (status int, body string) {
	return http.StatusTooManyRequests, fmt.Sprintf("custom deny: retry in %ds\n", guard.Seconds(v.Decision.RetryAfter))
}

// ChallengeReply is what the adapter's native challenge handler answers
// when Options.ChallengeHandler is set: status 401 and this body, naming
// the challenged policy, written the framework's way.
func ChallengeReply(v *guard.Verdict) (status int, body string) {
	return http.StatusUnauthorized, "custom challenge: " + v.ItemName() + "\n"
}

// errDown is the error of a store that is down.
var errDown = fmt.Errorf("adaptertest: store down")
