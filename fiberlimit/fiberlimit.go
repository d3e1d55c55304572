package fiberlimit

import (
	"context"
	"sync"
	"time"
	"unsafe"

	"github.com/gofiber/fiber/v2"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
)

// next, denyHandler and challengeHandler are this adapter's own
// settings, carried by guard.Native.
type (
	next             func(c *fiber.Ctx) bool
	denyHandler      func(c *fiber.Ctx, v *guard.Verdict) error
	challengeHandler func(c *fiber.Ctx, v *guard.Verdict) error
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

// WithChallengeHandler hands a challenged request to h instead of the
// default answer, returning its error from the handler: a request that
// would reach a rule's Challenge (core.Rule.Challenge) from a key that has
// not passed one (guard.OutcomeChallenge); it consumed nothing. h asks for
// the CAPTCHA or second factor the app's way; once the app has verified
// it, it calls core.Limiter.Pass for the key, and the client's next
// request goes on. The rate-limit headers are already set when h is
// called; there is no Retry-After. By default the answer is 429 with an
// application/problem+json body of type guard.ChallengeProblemType (see
// [Write]).
func WithChallengeHandler(h func(c *fiber.Ctx, v *guard.Verdict) error) guard.Option {
	return guard.Native(challengeHandler(h))
}

// New returns a fiber handler that limits requests with l, configured by
// the [guard] options and this package's own. The handler is safe for
// concurrent use; build it once and mount it on as many routes or groups
// as needed. New panics if l is nil, an option belongs to another
// adapter, or guard.WithStore or guard.WithName is given (they configure
// the limiter of the LimitBy functions): programmer errors caught at
// start-up.
func New(l *core.Limiter, opts ...guard.Option) fiber.Handler {
	return handler("fiberlimit.New", guard.New(l, opts...))
}

// UseStore sets the store of the one-liners built after it ([LimitByIP],
// [LimitByAppKey], [LimitByUser], and those of every other adapter) for
// the whole process: one line at start-up, before the handlers are
// built, moves them all to Redis, where every instance counts together:
//
//	fiberlimit.UseStore(redisstore.New(rdb))
//
// It is guard.UseStore, here so that this package's import suffices; it
// panics, as that does, on a nil store, on a second call, and after
// one-liners were built without guard.WithStore: programmer errors caught
// at start-up.
func UseStore(s core.Store) { guard.UseStore(s) }

// LimitByIP returns a fiber handler that admits limit requests per window
// of length per for each client IP, in this process's memory unless
// [UseStore] or guard.WithStore gives a store (Redis: every instance
// counts together). Each is a limit of its own, even beside another of
// the same rate (see guard.WithName):
//
//	app.Use(fiberlimit.LimitByIP(100, time.Minute))
//
// The key is the TCP peer's address (fiber's c.IP and its ProxyHeader are
// not used): behind a reverse proxy, pass
// guard.WithKey(keyfunc.ClientIP(keyfunc.TrustedProxies(...))). It takes
// the guard options and this package's own, as [New] does, and panics,
// naming the field, on an invalid limit, window, store or name; see
// [guard.LimitByIP].
func LimitByIP(limit int64, per time.Duration, opts ...guard.Option) fiber.Handler {
	return handler("fiberlimit.LimitByIP", guard.LimitByIP(limit, per, opts...))
}

// LimitByAppKey returns a fiber handler that admits limit requests per
// window of length per for each API key (the X-API-Key header, else the
// api_key query parameter); requests without one are not limited by it.
// It is configured and panics as [LimitByIP]; see [guard.LimitByAppKey].
func LimitByAppKey(limit int64, per time.Duration, opts ...guard.Option) fiber.Handler {
	return handler("fiberlimit.LimitByAppKey", guard.LimitByAppKey(limit, per, opts...))
}

// LimitByUser returns a fiber handler that admits limit requests per
// window of length per for each user: the ID your authentication
// middleware stored with c.Locals(user, id) (or in c.UserContext()).
// Register it after that middleware:
//
//	api := app.Group("/api", auth, fiberlimit.LimitByUser("user", 100, time.Minute))
//
// Requests without a user are not limited by it. It is configured and
// panics as [LimitByIP]; see [guard.LimitByUser].
func LimitByUser(user any, limit int64, per time.Duration, opts ...guard.Option) fiber.Handler {
	return handler("fiberlimit.LimitByUser", guard.LimitByUser(user, limit, per, opts...))
}

// handler returns the fiber handler of g; fn names the constructor in
// panics.
func handler(fn string, g *guard.Guard) fiber.Handler {
	var (
		skip      next
		deny      denyHandler
		challenge challengeHandler
	)
	g.ReadNatives(fn, &skip, &deny, &challenge)
	finish := g.NeedsFinish()
	return func(c *fiber.Ctx) error {
		if skip != nil && skip(c) {
			return c.Next()
		}
		ctx := c.UserContext()
		v := g.Admit(ctx, request{c})
		h := &c.Response().Header // copies what it is given
		v.WriteHeaderBytes(func(name string, value []byte) { h.SetCanonical(nameBytes(name), value) }, h.AddBytesV)
		if !v.Proceed() {
			switch {
			case deny != nil && v.Outcome == guard.OutcomeDeny:
				d := v // only refusals pay for the copy the handler may keep
				return deny(c, &d)
			case challenge != nil && v.Outcome == guard.OutcomeChallenge:
				d := v
				return challenge(c, &d)
			}
			return Write(c, &v)
		}
		if !finish {
			return c.Next()
		}
		return nextAndFinish(ctx, c, &v)
	}
}

// nextAndFinish runs the rest of the chain and finishes v with the status
// the client gets. A returned error is handed to the app's ErrorHandler
// here, as fiber's logger middleware does, so that the status it renders
// is the one finished; nil is returned so that fiber does not render it a
// second time. A panic is finished as 500 and goes on, unrecovered, to
// the recover middleware.
func nextAndFinish(ctx context.Context, c *fiber.Ctx, v *guard.Verdict) error {
	done := false
	defer func() {
		if !done {
			v.Finish(ctx, fiber.StatusInternalServerError)
		}
	}()
	if err := c.Next(); err != nil {
		if catch := c.App().ErrorHandler(c, err); catch != nil {
			// What fiber answers when the ErrorHandler fails.
			_ = c.SendStatus(fiber.StatusInternalServerError)
		}
	}
	done = true
	status := c.Response().StatusCode()
	if c.Response().IsBodyStream() || c.Context().Hijacked() {
		// The body is written (or the hijacked connection served) after
		// the chain returns: the request is in flight until then.
		// fasthttp closes a request's values that are io.Closers once it
		// has written the response, or the hijack handler has returned,
		// or the connection has failed.
		a := &afterBody{ctx: ctx, v: *v, status: status}
		c.Context().SetUserValue(a, a)
		return nil
	}
	v.Finish(ctx, status)
	return nil
}

// afterBody finishes a verdict when fasthttp lets go of its request.
type afterBody struct {
	ctx    context.Context
	v      guard.Verdict
	status int
	once   sync.Once
}

// Close finishes the verdict, once.
func (a *afterBody) Close() error {
	a.once.Do(func() { a.v.Finish(a.ctx, a.status) })
	return nil
}

// Write writes the guard's answer for a request that does not proceed:
// status, content type and fixed body. Headers from v.WriteHeaderFields must be
// set before. Deny and challenge handlers may call it to fall back to the
// default answer.
func Write(c *fiber.Ctx, v *guard.Verdict) error {
	status, body := v.Answer(c.Set)
	return c.Status(status).Send(body)
}

// nameBytes returns the bytes of a header field name of guard's, for
// fasthttp's SetCanonical, which copies them and writes none: guard's
// names are in canonical form (fasthttp's and net/http's alike), so that
// SetCanonical skips the normalising copy that SetBytesV makes of every
// name (a sixth of the middleware's time). fasthttp's own AddBytesV
// passes its string keys the same way.
func nameBytes(name string) []byte { return unsafe.Slice(unsafe.StringData(name), len(name)) }
