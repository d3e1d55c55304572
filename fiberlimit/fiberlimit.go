package fiberlimit

import (
	"context"
	"errors"

	"github.com/gofiber/fiber/v2"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfunc"
)

// Option configures the middleware.
type Option func(*config)

type config struct {
	guard []core.GuardOption
	next  func(*fiber.Ctx) bool
	deny  func(*fiber.Ctx, *core.Verdict) error
}

// WithKey sets the key function; keyfunc.ClientIP() by default.
func WithKey(f keyfunc.Func) Option { return guard(core.WithKey(f)) }

// WithSkip sets a predicate for requests that are not limited; none by
// default. [WithNext] is the same with fiber's own signature.
func WithSkip(f func(keyfunc.Request) bool) Option { return guard(core.WithSkip(f)) }

// WithCost sets the units a request costs; 1 by default. See [core.WithCost].
func WithCost(f func(keyfunc.Request) int64) Option { return guard(core.WithCost(f)) }

// WithCountIf counts a request only when count(status) is true for the
// handler's status; every admitted request counts by default. See
// [core.WithCountIf]. When the handler returns an error, the status is the
// *fiber.Error's code, else 500, as fiber's default error handler answers.
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

// WithNext sets fiber's usual skipper: when next(c) is true the request
// goes on unlimited, without rate-limit headers. None by default.
func WithNext(next func(c *fiber.Ctx) bool) Option {
	return func(c *config) { c.next = next }
}

// WithDenyHandler replaces the 429 answer; its error is returned from the
// middleware, so returning a *fiber.Error hands the denial to the app's
// ErrorHandler. The rate-limit headers and Retry-After are already set
// when h is called. By default the answer is the guard's fixed body (see
// [Write]).
func WithDenyHandler(h func(c *fiber.Ctx, v *core.Verdict) error) Option {
	return func(c *config) { c.deny = h }
}

func guard(o core.GuardOption) Option {
	return func(c *config) { c.guard = append(c.guard, o) }
}

// New returns a fiber handler that limits requests with l. The handler is
// safe for concurrent use; build it once and mount it on as many routes or
// groups as needed. New panics if l is nil, a programmer error caught at
// start-up.
func New(l *core.Limiter, opts ...Option) fiber.Handler {
	var cfg config
	for _, opt := range opts {
		opt(&cfg)
	}
	g := core.NewGuard(l, cfg.guard...)
	finish := g.NeedsFinish()
	return func(c *fiber.Ctx) error {
		if cfg.next != nil && cfg.next(c) {
			return c.Next()
		}
		ctx := c.UserContext()
		v := g.Check(ctx, request{c})
		v.WriteHeaders(c.Set)
		if !v.Proceed() {
			if cfg.deny != nil && v.Outcome == core.OutcomeDeny {
				d := v // only denials pay for the copy the handler may keep
				return cfg.deny(c, &d)
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
func Write(c *fiber.Ctx, v *core.Verdict) error {
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
