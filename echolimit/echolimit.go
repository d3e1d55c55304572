package echolimit

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/labstack/echo/v4"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
)

// skipper, denyHandler and challengeHandler are this adapter's own
// settings, carried by guard.Native.
type (
	skipper          func(c echo.Context) bool
	denyHandler      func(c echo.Context, v *guard.Verdict) error
	challengeHandler func(c echo.Context, v *guard.Verdict) error
)

// WithSkipper sets echo's usual skipper: when it returns true the request
// goes on unlimited, without rate-limit headers. None by default. It
// accepts a middleware.Skipper; the parameter is the plain func type so
// that this package does not import echo's middleware package (and its
// golang.org/x/time dependency).
func WithSkipper(s func(c echo.Context) bool) guard.Option {
	return guard.Native(skipper(s))
}

// WithDenyHandler replaces the 429 answer; its error is returned from the
// middleware. The rate-limit headers and Retry-After are already set when
// h is called. To render denials with the app's HTTPErrorHandler, return
// an *echo.HTTPError:
//
//	echolimit.WithDenyHandler(func(c echo.Context, v *guard.Verdict) error {
//		return echo.NewHTTPError(http.StatusTooManyRequests, "slow down")
//	})
//
// By default the answer is the guard's fixed body (see [Write]).
func WithDenyHandler(h func(c echo.Context, v *guard.Verdict) error) guard.Option {
	return guard.Native(denyHandler(h))
}

// WithChallengeHandler hands a challenged request to h instead of the
// default answer, returning its error from the middleware: a request that
// would reach a rule's Challenge (core.Rule.Challenge) from a key that has
// not passed one (guard.OutcomeChallenge); it consumed nothing. h asks for
// the CAPTCHA or second factor the app's way; once the app has verified
// it, it calls core.Limiter.Pass for the key, and the client's next
// request goes on. The rate-limit headers are already set when h is
// called; there is no Retry-After. By default the answer is 429 with an
// application/problem+json body of type guard.ChallengeProblemType (see
// [Write]).
func WithChallengeHandler(h func(c echo.Context, v *guard.Verdict) error) guard.Option {
	return guard.Native(challengeHandler(h))
}

// New returns echo middleware that limits requests with l, configured by
// the [guard] options and this package's own. The middleware is safe for
// concurrent use; build it once and use it on as many routes or groups as
// needed. New panics if l is nil, an option belongs to another adapter,
// or guard.WithStore or guard.WithName is given (they configure the
// limiter of the LimitBy functions): programmer errors caught at
// start-up.
//
// Denials, bad keys and store outages are written directly (see [Write])
// rather than returned as *echo.HTTPError, so every ratekit adapter
// answers with the same status, headers and body whatever the app's
// HTTPErrorHandler does; use [WithDenyHandler] to hand denials to it.
func New(l *core.Limiter, opts ...guard.Option) echo.MiddlewareFunc {
	return middleware("echolimit.New", guard.New(l, opts...))
}

// UseStore sets the store of the one-liners built after it ([LimitByIP],
// [LimitByAppKey], [LimitByUser], and those of every other adapter) for
// the whole process: one line at start-up, before the middleware are
// built, moves them all to Redis, where every instance counts together:
//
//	echolimit.UseStore(redisstore.New(rdb))
//
// It is guard.UseStore, here so that this package's import suffices; it
// panics, as that does, on a nil store, on a second call, and after
// one-liners were built without guard.WithStore: programmer errors caught
// at start-up.
func UseStore(s core.Store) { guard.UseStore(s) }

// LimitByIP returns echo middleware that admits limit requests per window
// of length per for each client IP, in this process's memory unless
// [UseStore] or guard.WithStore gives a store (Redis: every instance
// counts together). Each is a limit of its own, even beside another of
// the same rate (see guard.WithName):
//
//	e.Use(echolimit.LimitByIP(100, time.Minute))
//
// The key is the TCP peer's address (echo's c.RealIP is not used): behind
// a reverse proxy, pass
// guard.WithKey(keyfunc.ClientIP(keyfunc.TrustedProxies(...))). It takes
// the guard options and this package's own, as [New] does, and panics,
// naming the field, on an invalid limit, window, store or name; see
// [guard.LimitByIP].
func LimitByIP(limit int64, per time.Duration, opts ...guard.Option) echo.MiddlewareFunc {
	return middleware("echolimit.LimitByIP", guard.LimitByIP(limit, per, opts...))
}

// LimitByAppKey returns echo middleware that admits limit requests per
// window of length per for each API key (the X-API-Key header, else the
// api_key query parameter); requests without one are not limited by it.
// It is configured and panics as [LimitByIP]; see [guard.LimitByAppKey].
func LimitByAppKey(limit int64, per time.Duration, opts ...guard.Option) echo.MiddlewareFunc {
	return middleware("echolimit.LimitByAppKey", guard.LimitByAppKey(limit, per, opts...))
}

// LimitByUser returns echo middleware that admits limit requests per
// window of length per for each user: the ID your authentication
// middleware stored with c.Set(user, id) (or in the request context).
// echo's c.Set takes string keys, so user is a string here, unless the ID
// is in the request context under a key of another type. Register it after
// that middleware:
//
//	g := e.Group("/reports", auth, echolimit.LimitByUser("user", 100, time.Minute))
//
// Requests without a user are not limited by it. It is configured and
// panics as [LimitByIP]; see [guard.LimitByUser].
func LimitByUser(user any, limit int64, per time.Duration, opts ...guard.Option) echo.MiddlewareFunc {
	return middleware("echolimit.LimitByUser", guard.LimitByUser(user, limit, per, opts...))
}

// middleware returns the echo middleware of g; fn names the constructor
// in panics.
func middleware(fn string, g *guard.Guard) echo.MiddlewareFunc {
	m := &limiter{g: g}
	g.ReadNatives(fn, &m.skip, &m.deny, &m.challenge)
	m.finish = g.NeedsFinish()
	return m.wrap
}

// limiter is the middleware of a guard.
type limiter struct {
	g         *guard.Guard
	skip      skipper
	deny      denyHandler
	challenge challengeHandler
	finish    bool
	handlers  [16]handlerSlot
}

// handlerSlot keeps the handler built for one next (see limiter.wrap).
type handlerSlot struct {
	seen atomic.Uintptr          // the next last seen that the slot did not hold
	h    atomic.Pointer[handler] // set once
}

// handler is the handler built for the next whose closure is at next.
type handler struct {
	next unsafe.Pointer
	h    echo.HandlerFunc
}

// wrap returns the handler that limits requests before next. echo v4
// applies route and group middleware on every request (and e.Use
// middleware to the route's handler on every request), calling wrap with
// the same next each time; building a handler allocates, so the handler
// of a next seen twice is kept, in one of a few slots chosen by the
// address of next's closure, and found there again by that address. The
// same closure is the same function: the handler kept calls exactly what
// a new one would. A slot keeps the first such handler for good, so that
// a next built anew for every request (an outer middleware's) costs no
// more than it did before, and the handlers kept are at most as many as
// the slots.
func (m *limiter) wrap(next echo.HandlerFunc) echo.HandlerFunc {
	fn := next // next itself, captured below, must not have its address taken
	id := *(*unsafe.Pointer)(unsafe.Pointer(&fn))
	slot := &m.handlers[(uintptr(id)>>4)%uintptr(len(m.handlers))]
	kept := slot.h.Load()
	if kept != nil && kept.next == id {
		return kept.h
	}
	h := func(c echo.Context) error { return m.serve(c, next) }
	if kept == nil && slot.seen.Swap(uintptr(id)) == uintptr(id) {
		slot.h.CompareAndSwap(nil, &handler{next: id, h: h})
	}
	return h
}

// serve limits the request of c before next.
func (m *limiter) serve(c echo.Context, next echo.HandlerFunc) error {
	if m.skip != nil && m.skip(c) {
		return next(c)
	}
	r := c.Request()
	ctx := r.Context()
	loc := localsPool.Get().(*locals)
	loc.c = c
	v := m.g.AdmitHTTP(ctx, r, c.Path(), loc)
	loc.c = nil
	localsPool.Put(loc)
	v.WriteHTTPHeaders(c.Response().Header())
	if !v.Proceed() {
		switch {
		case m.deny != nil && v.Outcome == guard.OutcomeDeny:
			d := v // only refusals pay for the copy the handler may keep
			return m.deny(c, &d)
		case m.challenge != nil && v.Outcome == guard.OutcomeChallenge:
			d := v
			return m.challenge(c, &d)
		}
		return Write(c, &v)
	}
	if !m.finish {
		return next(c)
	}
	return nextAndFinish(ctx, next, c, &v)
}

// nextAndFinish runs the rest of the chain and finishes v with the status
// the client gets. A returned error is handed to the app's
// HTTPErrorHandler here (c.Error), as echo's RequestLogger does with
// HandleError, so that the status it renders is the one finished; nil is
// returned so that echo does not render it a second time. A panic is
// finished as 500 and goes on, unrecovered, to the Recover middleware.
func nextAndFinish(ctx context.Context, next echo.HandlerFunc, c echo.Context, v *guard.Verdict) error {
	done := false
	defer func() {
		if !done {
			v.Finish(ctx, http.StatusInternalServerError)
		}
	}()
	if err := next(c); err != nil {
		c.Error(err)
	}
	done = true
	status := c.Response().Status
	if status == 0 { // a context from e.NewContext that wrote nothing
		status = http.StatusOK
	}
	v.Finish(ctx, status)
	return nil
}

// Write writes the guard's answer for a request that does not proceed:
// status, content type and fixed body. Headers from v.WriteHTTPHeaders must be
// set before. Deny and challenge handlers may call it to fall back to the
// default answer.
func Write(c echo.Context, v *guard.Verdict) error {
	res := c.Response()
	status, body := v.Answer(res.Header().Set)
	res.WriteHeader(status)
	_, err := res.Write(body)
	return err
}

// locals looks string keys up in the echo context's store (c.Set).
type locals struct{ c echo.Context }

// localsPool keeps the locals of requests being admitted, so that passing
// one as keyfunc.Locals allocates nothing.
var localsPool = sync.Pool{New: func() any { return new(locals) }}

func (l *locals) Local(key any) any {
	if s, ok := key.(string); ok {
		return l.c.Get(s)
	}
	return nil
}
