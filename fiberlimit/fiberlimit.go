package fiberlimit

import (
	"context"
	"errors"

	"github.com/gofiber/fiber/v2"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
)

// next and denyHandler are this adapter's own settings, carried by
// guard.Native.
type (
	next        func(c *fiber.Ctx) bool
	denyHandler func(c *fiber.Ctx, v *guard.Verdict) error
)

// WithNext sets fiber's usual skipper: when next(c) is true the request
// goes on unlimited, without rate-limit headers. None by default.
func WithNext(f func(c *fiber.Ctx) bool) guard.Option {
	return guard.Native(next(f))
}

// WithDenyHandler replaces the 429 answer; its error is returned from the
// middleware, so returning a *fiber.Error hands the denial to the app's
// ErrorHandler. The rate-limit headers and Retry-After are already set
// when h is called. By default the answer is the guard's fixed body (see
// [Write]).
func WithDenyHandler(h func(c *fiber.Ctx, v *guard.Verdict) error) guard.Option {
	return guard.Native(denyHandler(h))
}

// New returns a fiber handler that limits requests with l, configured by
// the [guard] options and this package's own. The handler is safe for
// concurrent use; build it once and mount it on as many routes or groups
// as needed. New panics if l is nil or an option belongs to another
// adapter, programmer errors caught at start-up.
func New(l *core.Limiter, opts ...guard.Option) fiber.Handler {
	g := guard.New(l, opts...)
	var (
		skip next
		deny denyHandler
	)
	g.ReadNatives("fiberlimit.New", &skip, &deny)
	finish := g.NeedsFinish()
	return func(c *fiber.Ctx) error {
		if skip != nil && skip(c) {
			return c.Next()
		}
		ctx := c.UserContext()
		v := g.Admit(ctx, request{c})
		v.WriteHeaders(c.Set)
		if !v.Proceed() {
			if deny != nil && v.Outcome == guard.OutcomeDeny {
				d := v // only denials pay for the copy the handler may keep
				return deny(c, &d)
			}
			return Write(c, &v)
		}
		if !finish {
			return c.Next()
		}
		err := c.Next()
		v.Finish(context.WithoutCancel(ctx), status(c, err))
		return err
	}
}

// Write writes the guard's answer for a request that does not proceed:
// status, content type and fixed body. Headers from v.WriteHeaders must be
// set before. Deny handlers may call it to fall back to the default answer.
func Write(c *fiber.Ctx, v *guard.Verdict) error {
	status, body := v.Answer(c.Set)
	return c.Status(status).Send(body)
}

// status is the status the client will get. When the handler returned an
// error, fiber has not written it yet: the error handler will, with the
// *fiber.Error's code or 500.
func status(c *fiber.Ctx, err error) int {
	if err == nil {
		return c.Response().StatusCode()
	}
	var fe *fiber.Error
	if errors.As(err, &fe) {
		return fe.Code
	}
	return fiber.StatusInternalServerError
}
