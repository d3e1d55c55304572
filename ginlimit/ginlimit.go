package ginlimit

import (
	"context"
	"reflect"

	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfunc"
)

// Option configures the middleware.
type Option func(*config)

type config struct {
	guard []core.GuardOption
	deny  func(*gin.Context, *core.Verdict)
}

// WithKey sets the key function; keyfunc.ClientIP() by default.
func WithKey(f keyfunc.Func) Option { return guard(core.WithKey(f)) }

// WithSkip sets a predicate for requests that are not limited; none by
// default.
func WithSkip(f func(keyfunc.Request) bool) Option { return guard(core.WithSkip(f)) }

// WithCost sets the units a request costs; 1 by default. See [core.WithCost].
func WithCost(f func(keyfunc.Request) int64) Option { return guard(core.WithCost(f)) }

// WithCountIf counts a request only when count(status) is true for the
// status the rest of the chain answered (c.Writer.Status()); every
// admitted request counts by default. See [core.WithCountIf].
//
// The status is read when the rest of the chain returns: a middleware
// registered before this one that writes the answer afterwards (say, from
// c.Errors) is not seen, and an unwritten answer counts as 200. Register
// such error-rendering middleware after this one, or write the status in
// the handler.
func WithCountIf(count func(status int) bool) Option { return guard(core.WithCountIf(count)) }

// WithResetIf resets the key when reset(status) is true for the status the
// rest of the chain answered; off by default. See [core.WithResetIf].
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

// WithDenyHandler replaces the 429 answer. The rate-limit headers and
// Retry-After are already set when h is called, and the chain is aborted
// after it returns. By default the answer is the guard's fixed body (see
// [Write]).
func WithDenyHandler(h func(c *gin.Context, v *core.Verdict)) Option {
	return func(c *config) { c.deny = h }
}

func guard(o core.GuardOption) Option {
	return func(c *config) { c.guard = append(c.guard, o) }
}

// New returns a gin handler that limits requests with l. The handler is
// safe for concurrent use; build it once and use it on as many routes or
// groups as needed. New panics if l is nil, a programmer error caught at
// start-up.
//
// Key functions see c.Request.Context() as the request context, never the
// *gin.Context, and find values set with c.Set through
// keyfunc.Request.Value.
func New(l *core.Limiter, opts ...Option) gin.HandlerFunc {
	var cfg config
	for _, opt := range opts {
		opt(&cfg)
	}
	g := core.NewGuard(l, cfg.guard...)
	finish := g.NeedsFinish()
	return func(c *gin.Context) {
		ctx := c.Request.Context()
		v := g.Check(ctx, keyfunc.FromHTTPWithValues(c.Request, c.FullPath(), (*locals)(c)))
		v.WriteHeaders(c.Writer.Header().Set)
		if !v.Proceed() {
			if cfg.deny != nil && v.Outcome == core.OutcomeDeny {
				d := v // only denials pay for the copy the handler may keep
				cfg.deny(c, &d)
			} else {
				Write(c, &v)
			}
			c.Abort()
			return
		}
		if !finish {
			return // gin runs the rest of the chain
		}
		c.Next()
		v.Finish(context.WithoutCancel(ctx), c.Writer.Status())
	}
}

// Write writes the guard's answer for a request that does not proceed:
// status, content type and fixed body. Headers from v.WriteHeaders must be
// set before. Deny handlers may call it to fall back to the default answer.
// It does not abort the chain; New does.
func Write(c *gin.Context, v *core.Verdict) {
	status, body := v.Answer(c.Writer.Header().Set)
	c.Status(status)
	_, _ = c.Writer.Write(body)
}

// locals looks keys up in the gin context's Keys (c.Set): a conversion of
// the *gin.Context, so the request view allocates nothing for it. Keys that
// cannot be map keys find nothing rather than panic.
type locals gin.Context

func (l *locals) Local(key any) any {
	if key == nil || !reflect.TypeOf(key).Comparable() {
		return nil
	}
	v, _ := (*gin.Context)(l).Get(key)
	return v
}
