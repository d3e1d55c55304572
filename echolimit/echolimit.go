package echolimit

import (
	"context"
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/keyfunc"
)

// skipper and denyHandler are this adapter's own settings, carried by
// guard.Native.
type (
	skipper     func(c echo.Context) bool
	denyHandler func(c echo.Context, v *guard.Verdict) error
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

// New returns echo middleware that limits requests with l, configured by
// the [guard] options and this package's own. The middleware is safe for
// concurrent use; build it once and use it on as many routes or groups as
// needed. New panics if l is nil or an option belongs to another adapter,
// programmer errors caught at start-up.
//
// Denials, bad keys and store outages are written directly (see [Write])
// rather than returned as *echo.HTTPError, so every ratekit adapter
// answers with the same status, headers and body whatever the app's
// HTTPErrorHandler does; use [WithDenyHandler] to hand denials to it.
func New(l *core.Limiter, opts ...guard.Option) echo.MiddlewareFunc {
	g := guard.New(l, opts...)
	var (
		skip skipper
		deny denyHandler
	)
	g.ReadNatives("echolimit.New", &skip, &deny)
	finish := g.NeedsFinish()
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if skip != nil && skip(c) {
				return next(c)
			}
			r := c.Request()
			ctx := r.Context()
			v := g.Admit(ctx, keyfunc.FromHTTPWithValues(r, c.Path(), locals{c}))
			v.WriteHeaders(c.Response().Header().Set)
			if !v.Proceed() {
				if deny != nil && v.Outcome == guard.OutcomeDeny {
					d := v // only denials pay for the copy the handler may keep
					return deny(c, &d)
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
func Write(c echo.Context, v *guard.Verdict) error {
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
