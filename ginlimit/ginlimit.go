package ginlimit

import (
	"context"
	"net/http"
	"reflect"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
)

// denyHandler and challengeHandler are this adapter's own settings,
// carried by guard.Native.
type (
	denyHandler      func(c *gin.Context, v *guard.Verdict)
	challengeHandler func(c *gin.Context, v *guard.Verdict)
)

// WithDenyHandler replaces the 429 answer. The rate-limit headers and
// Retry-After are already set when h is called, and the chain is aborted
// after it returns. By default the answer is the guard's fixed body (see
// [Write]).
func WithDenyHandler(h func(c *gin.Context, v *guard.Verdict)) guard.Option {
	return guard.Native(denyHandler(h))
}

// WithChallengeHandler hands a challenged request to h instead of the
// default answer: one that would reach a rule's Challenge
// (core.Rule.Challenge) from a key that has not passed one
// (guard.OutcomeChallenge); it consumed nothing. h asks for the CAPTCHA
// or second factor the app's way; once the app has verified it, it calls
// core.Limiter.Pass for the key, and the client's next request goes on.
// The rate-limit headers are already set when h is called (there is no
// Retry-After), and the chain is aborted after it returns. By default the
// answer is 429 with an application/problem+json body of type
// guard.ChallengeProblemType (see [Write]).
func WithChallengeHandler(h func(c *gin.Context, v *guard.Verdict)) guard.Option {
	return guard.Native(challengeHandler(h))
}

// New returns a gin handler that limits requests with l, configured by
// the [guard] options and this package's own. The handler is safe for
// concurrent use; build it once and use it on as many routes or groups as
// needed. New panics if l is nil, an option belongs to another adapter,
// or guard.WithStore or guard.WithName is given (they configure the
// limiter of the LimitBy functions): programmer errors caught at
// start-up.
//
// With guard.WithCountIf the status is c.Writer.Status() when the rest of
// the chain returns: a middleware registered before this one that writes
// the answer afterwards (say, from c.Errors) is not seen, and an unwritten
// answer counts as 200. Register such error-rendering middleware after
// this one, or write the status in the handler.
func New(l *core.Limiter, opts ...guard.Option) gin.HandlerFunc {
	return handler("ginlimit.New", guard.New(l, opts...))
}

// UseStore sets the store of the one-liners built after it ([LimitByIP],
// [LimitByAppKey], [LimitByUser], and those of every other adapter) for
// the whole process: one line at start-up, before the handlers are
// built, moves them all to Redis, where every instance counts together:
//
//	ginlimit.UseStore(redisstore.New(rdb))
//
// It is guard.UseStore, here so that this package's import suffices; it
// panics, as that does, on a nil store, on a second call, and after
// one-liners were built without guard.WithStore: programmer errors caught
// at start-up.
func UseStore(s core.Store) { guard.UseStore(s) }

// LimitByIP returns a gin handler that admits limit requests per window
// of length per for each client IP, in this process's memory unless
// [UseStore] or guard.WithStore gives a store (Redis: every instance
// counts together). Each is a limit of its own, even beside another of
// the same rate (see guard.WithName):
//
//	r.Use(ginlimit.LimitByIP(100, time.Minute))
//
// The key is the TCP peer's address (gin's c.ClientIP is not used):
// behind a reverse proxy, pass
// guard.WithKey(keyfunc.ClientIP(keyfunc.TrustedProxies(...))). It takes
// the guard options and this package's own, as [New] does, and panics,
// naming the field, on an invalid limit, window, store or name; see
// [guard.LimitByIP].
func LimitByIP(limit int64, per time.Duration, opts ...guard.Option) gin.HandlerFunc {
	return handler("ginlimit.LimitByIP", guard.LimitByIP(limit, per, opts...))
}

// LimitByAppKey returns a gin handler that admits limit requests per
// window of length per for each API key (the X-API-Key header, else the
// api_key query parameter); requests without one are not limited by it.
// It is configured and panics as [LimitByIP]; see [guard.LimitByAppKey].
func LimitByAppKey(limit int64, per time.Duration, opts ...guard.Option) gin.HandlerFunc {
	return handler("ginlimit.LimitByAppKey", guard.LimitByAppKey(limit, per, opts...))
}

// LimitByUser returns a gin handler that admits limit requests per window
// of length per for each user: the ID your authentication middleware
// stored with c.Set(user, id) (or in the request context). Register it
// after that middleware:
//
//	authed := r.Group("/", auth, ginlimit.LimitByUser("user", 100, time.Minute))
//
// Requests without a user are not limited by it. It is configured and
// panics as [LimitByIP]; see [guard.LimitByUser].
func LimitByUser(user any, limit int64, per time.Duration, opts ...guard.Option) gin.HandlerFunc {
	return handler("ginlimit.LimitByUser", guard.LimitByUser(user, limit, per, opts...))
}

// handler returns the gin handler of g; fn names the constructor in
// panics.
func handler(fn string, g *guard.Guard) gin.HandlerFunc {
	var (
		deny      denyHandler
		challenge challengeHandler
	)
	g.ReadNatives(fn, &deny, &challenge)
	finish := g.NeedsFinish()
	return func(c *gin.Context) {
		ctx := c.Request.Context()
		v := g.AdmitHTTP(ctx, c.Request, c.FullPath(), (*locals)(c))
		v.WriteHTTPHeaders(c.Writer.Header())
		if !v.Proceed() {
			switch {
			case deny != nil && v.Outcome == guard.OutcomeDeny:
				d := v // only refusals pay for the copy the handler may keep
				deny(c, &d)
			case challenge != nil && v.Outcome == guard.OutcomeChallenge:
				d := v
				challenge(c, &d)
			default:
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
// set before. Deny and challenge handlers may call it to fall back to the
// default answer. It does not abort the chain; New does.
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
