package echolimit

import (
	"context"
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfunc"
)

// Option configures the middleware.
type Option func(*config)

type config struct {
	guard   []core.GuardOption
	skipper func(echo.Context) bool
	deny    func(echo.Context, *core.Verdict) error
}

// WithKey sets the key function; keyfunc.ClientIP() by default.
func WithKey(f keyfunc.Func) Option { return guard(core.WithKey(f)) }

// WithSkip sets a predicate for requests that are not limited; none by
// default. [WithSkipper] is the same with echo's own signature.
func WithSkip(f func(keyfunc.Request) bool) Option { return guard(core.WithSkip(f)) }

// WithCost sets the units a request costs; 1 by default. See [core.WithCost].
func WithCost(f func(keyfunc.Request) int64) Option { return guard(core.WithCost(f)) }

// WithCountIf counts a request only when count(status) is true for the
// handler's status; every admitted request counts by default. See
// [core.WithCountIf]. When the handler returns an error before writing a
// response, the status is the *echo.HTTPError's code, else 500, as echo's
// default error handler answers.
func WithCountIf(count func(status int) bool) Option { return guard(core.WithCountIf(count)) }

// WithResetIf resets the key when reset(status) is true for the handler's
// status; off by default. See [core.WithResetIf] and [WithCountIf] for how
// the status is found.
func WithResetIf(reset func(status int) bool) Option { return guard(core.WithResetIf(reset)) }

// WithAlso adds a limit decided together with this one: l keyed by key.
// The request is admitted only if every limit admits it, and a request
// denied by one consumes nothing from the others, even when their keys
// live in different Redis Cluster slots. A denial is answered with the
// denying limit's headers and body. See [core.WithAlso]; it panics if l or
// key is nil, a programmer error caught at start-up.
func WithAlso(l *core.Limiter, key keyfunc.Func) Option { return guard(core.WithAlso(l, key)) }

// WithHeaders selects the rate-limit header fields;
// [core.HeadersXRateLimit] by default.
func WithHeaders(s core.HeaderStyle) Option { return guard(core.WithHeaders(s)) }

// WithBody selects the denial body; [core.BodyText] by default.
func WithBody(s core.BodyStyle) Option { return guard(core.WithBody(s)) }

// WithNoKey says what to do with requests that have no key;
// [core.NoKeySkip] by default.
func WithNoKey(a core.NoKeyAction) Option { return guard(core.WithNoKey(a)) }

// WithKeyError says what to do when the key function fails;
// [core.KeyErrorReject] (400) by default.
func WithKeyError(a core.KeyErrorAction) Option { return guard(core.WithKeyError(a)) }

// WithDryRun decides and reports but never blocks; off by default.
func WithDryRun(on bool) Option { return guard(core.WithDryRun(on)) }

// WithObserver adds an observer of every request the middleware handles.
func WithObserver(o core.Observer) Option { return guard(core.WithGuardObserver(o)) }

// WithSkipper sets echo's usual skipper: when it returns true the request
// goes on unlimited, without rate-limit headers. None by default. It
// accepts a middleware.Skipper; the parameter is the plain func type so
// that this package does not import echo's middleware package (and its
// golang.org/x/time dependency).
func WithSkipper(s func(c echo.Context) bool) Option {
	return func(c *config) { c.skipper = s }
}

// WithDenyHandler replaces the 429 answer; its error is returned from the
// middleware. The rate-limit headers and Retry-After are already set when
// h is called. To render denials with the app's HTTPErrorHandler, return
// an *echo.HTTPError:
//
//	echolimit.WithDenyHandler(func(c echo.Context, v *core.Verdict) error {
//		return echo.NewHTTPError(http.StatusTooManyRequests, "slow down")
//	})
//
// By default the answer is the guard's fixed body (see [Write]).
func WithDenyHandler(h func(c echo.Context, v *core.Verdict) error) Option {
	return func(c *config) { c.deny = h }
}

func guard(o core.GuardOption) Option {
	return func(c *config) { c.guard = append(c.guard, o) }
}

// New returns echo middleware that limits requests with l. The middleware
// is safe for concurrent use; build it once and use it on as many routes
// or groups as needed. New panics if l is nil, a programmer error caught
// at start-up.
//
// Denials, bad keys and store outages are written directly (see [Write])
// rather than returned as *echo.HTTPError, so every ratekit adapter
// answers with the same status, headers and body whatever the app's
// HTTPErrorHandler does; use [WithDenyHandler] to hand denials to it.
func New(l *core.Limiter, opts ...Option) echo.MiddlewareFunc {
	var cfg config
	for _, opt := range opts {
		opt(&cfg)
	}
	g := core.NewGuard(l, cfg.guard...)
	finish := g.NeedsFinish()
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if cfg.skipper != nil && cfg.skipper(c) {
				return next(c)
			}
			r := c.Request()
			ctx := r.Context()
			v := g.Check(ctx, keyfunc.FromHTTPWithValues(r, c.Path(), locals{c}))
			v.WriteHeaders(c.Response().Header().Set)
			if !v.Proceed() {
				if cfg.deny != nil && v.Outcome == core.OutcomeDeny {
					d := v // only denials pay for the copy the handler may keep
					return cfg.deny(c, &d)
				}
				return Write(c, &v)
			}
			if !finish {
				return next(c)
			}
			err := next(c)
			v.Finish(context.WithoutCancel(ctx), status(c, err))
			return err
		}
	}
}

// Write writes the guard's answer for a request that does not proceed:
// status, content type and fixed body. Headers from v.WriteHeaders must be
// set before. Deny handlers may call it to fall back to the default answer.
func Write(c echo.Context, v *core.Verdict) error {
	res := c.Response()
	status, body := v.Answer(res.Header().Set)
	res.WriteHeader(status)
	_, err := res.Write(body)
	return err
}

// status is the status the client will get. When the handler returned an
// error without writing, echo has not answered yet: its error handler
// will, with the *echo.HTTPError's code or 500.
func status(c echo.Context, err error) int {
	res := c.Response()
	if err == nil || res.Committed {
		if res.Status == 0 { // a context from e.NewContext that wrote nothing
			return http.StatusOK
		}
		return res.Status
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		return he.Code
	}
	return http.StatusInternalServerError
}

// locals looks string keys up in the echo context's store (c.Set).
type locals struct{ c echo.Context }

func (l locals) Local(key any) any {
	if s, ok := key.(string); ok {
		return l.c.Get(s)
	}
	return nil
}
