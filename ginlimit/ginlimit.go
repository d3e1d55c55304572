package ginlimit

import (
	"context"
	"net/http"
	"reflect"

	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
)

// denyHandler is this adapter's own setting, carried by guard.Native.
type denyHandler func(c *gin.Context, v *guard.Verdict)

// WithDenyHandler replaces the 429 answer. The rate-limit headers and
// Retry-After are already set when h is called, and the chain is aborted
// after it returns. By default the answer is the guard's fixed body (see
// [Write]).
func WithDenyHandler(h func(c *gin.Context, v *guard.Verdict)) guard.Option {
	return guard.Native(denyHandler(h))
}

// New returns a gin handler that limits requests with l, configured by
// the [guard] options and this package's own. The handler is safe for
// concurrent use; build it once and use it on as many routes or groups as
// needed. New panics if l is nil or an option belongs to another adapter,
// programmer errors caught at start-up.
//
// With guard.WithCountIf the status is c.Writer.Status() when the rest of
// the chain returns: a middleware registered before this one that writes
// the answer afterwards (say, from c.Errors) is not seen, and an unwritten
// answer counts as 200. Register such error-rendering middleware after
// this one, or write the status in the handler.
func New(l *core.Limiter, opts ...guard.Option) gin.HandlerFunc {
	g := guard.New(l, opts...)
	var deny denyHandler
	g.ReadNatives("ginlimit.New", &deny)
	finish := g.NeedsFinish()
	return func(c *gin.Context) {
		ctx := c.Request.Context()
		v := g.AdmitHTTP(ctx, c.Request, c.FullPath(), (*locals)(c))
		v.WriteHTTPHeaders(c.Writer.Header())
		if !v.Proceed() {
			if deny != nil && v.Outcome == guard.OutcomeDeny {
				d := v // only denials pay for the copy the handler may keep
				deny(c, &d)
			} else {
				Write(c, &v)
			}
			c.Abort()
			return
		}
		if !finish {
			return // gin runs the rest of the chain
		}
		nextAndFinish(ctx, c, &v)
	}
}

// nextAndFinish runs the rest of the chain and finishes v with the status
// written. A panic is finished as 500 and goes on, unrecovered, to the
// Recovery middleware.
func nextAndFinish(ctx context.Context, c *gin.Context, v *guard.Verdict) {
	done := false
	defer func() {
		if !done {
			v.Finish(ctx, http.StatusInternalServerError)
		}
	}()
	c.Next()
	done = true
	v.Finish(ctx, c.Writer.Status())
}

// Write writes the guard's answer for a request that does not proceed:
// status, content type and fixed body. Headers from v.WriteHTTPHeaders must be
// set before. Deny handlers may call it to fall back to the default answer.
// It does not abort the chain; New does.
func Write(c *gin.Context, v *guard.Verdict) {
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
