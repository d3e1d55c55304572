package nethttp

import (
	"net/http"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
)

// denyHandler, challengeHandler and routeFunc are this adapter's own
// settings, carried by guard.Native.
type (
	denyHandler      func(w http.ResponseWriter, r *http.Request, v *guard.Verdict)
	challengeHandler func(w http.ResponseWriter, r *http.Request, v *guard.Verdict)
	routeFunc        func(r *http.Request) string
)

// WithDenyHandler replaces the 429 answer. The rate-limit headers and
// Retry-After are already set on w when h is called. By default the
// answer is the guard's fixed body (see [Write]).
func WithDenyHandler(h func(w http.ResponseWriter, r *http.Request, v *guard.Verdict)) guard.Option {
	return guard.Native(denyHandler(h))
}

// WithChallengeHandler hands a challenged request to h instead of the
// default answer: one that would reach a rule's Challenge
// (core.Rule.Challenge) from a key that has not passed one
// (guard.OutcomeChallenge); it consumed nothing. h asks for the CAPTCHA
// or second factor the app's way; once the app has verified it, it calls
// core.Limiter.Pass for the key, and the client's next request goes on.
// The rate-limit headers are already set on w when h is called; there is
// no Retry-After. By default the answer is 429 with an
// application/problem+json body of type guard.ChallengeProblemType (see
// [Write]).
func WithChallengeHandler(h func(w http.ResponseWriter, r *http.Request, v *guard.Verdict)) guard.Option {
	return guard.Native(challengeHandler(h))
}

// WithRoute sets how the route of a request is named for key functions
// (keyfunc.Request.Route, keyfunc.Route); by default it is the ServeMux
// pattern that matched (r.Pattern), "" when none has matched yet, as for
// middleware wrapped around a whole ServeMux, where keyfunc.Route then
// refuses the request rather than key it by its path. Routers such as chi
// know the route after routing: pass a function reading it there
// (chi.RouteContext(r.Context()).RoutePattern()).
func WithRoute(f func(r *http.Request) string) guard.Option {
	return guard.Native(routeFunc(f))
}

// New returns middleware that limits requests with l, configured by the
// [guard] options and this package's own. The middleware is safe for
// concurrent use; build it once and wrap as many handlers as needed. New
// panics if l is nil, an option belongs to another adapter, or
// guard.WithStore or guard.WithName is given (they configure the limiter of
// the LimitBy functions): programmer errors caught at start-up.
func New(l *core.Limiter, opts ...guard.Option) func(http.Handler) http.Handler {
	return middleware("nethttp.New", guard.New(l, opts...))
}

// UseStore sets the store of the one-liners built after it ([LimitByIP],
// [LimitByAppKey], [LimitByUser], and those of every other adapter) for
// the whole process: one line at start-up, before the middleware are
// built, moves them all to Redis, where every instance counts together:
//
//	nethttp.UseStore(redisstore.New(rdb))
//
// It is guard.UseStore, here so that this package's import suffices; it
// panics, as that does, on a nil store, on a second call, and after
// one-liners were built without guard.WithStore: programmer errors caught
// at start-up.
func UseStore(s core.Store) { guard.UseStore(s) }

// LimitByIP returns middleware that admits limit requests per window of
// length per for each client IP, in this process's memory unless
// [UseStore] or guard.WithStore gives a store (Redis: every instance
// counts together). Each is a limit of its own, even beside another of
// the same rate (see guard.WithName):
//
//	mux.Handle("GET /hello", nethttp.LimitByIP(100, time.Minute)(hello))
//
// The key is the TCP peer's address: behind a reverse proxy, pass
// guard.WithKey(keyfunc.ClientIP(keyfunc.TrustedProxies(...))). It takes
// the guard options and this package's own, as [New] does, and panics,
// naming the field, on an invalid limit, window, store or name; see
// [guard.LimitByIP].
func LimitByIP(limit int64, per time.Duration, opts ...guard.Option) func(http.Handler) http.Handler {
	return middleware("nethttp.LimitByIP", guard.LimitByIP(limit, per, opts...))
}

// LimitByAppKey returns middleware that admits limit requests per window
// of length per for each API key (the X-API-Key header, else the api_key
// query parameter); requests without one are not limited by it. It is
// configured and panics as [LimitByIP]; see [guard.LimitByAppKey].
func LimitByAppKey(limit int64, per time.Duration, opts ...guard.Option) func(http.Handler) http.Handler {
	return middleware("nethttp.LimitByAppKey", guard.LimitByAppKey(limit, per, opts...))
}

// LimitByUser returns middleware that admits limit requests per window of
// length per for each user: the ID your authentication middleware put in
// the request context under the key user (context.WithValue). Wrap it
// inside that middleware, so that it runs after it:
//
//	mux.Handle("GET /reports", authenticate(nethttp.LimitByUser(userKey{}, 100, time.Minute)(reports)))
//
// Requests without a user are not limited by it. It is configured and
// panics as [LimitByIP]; see [guard.LimitByUser].
func LimitByUser(user any, limit int64, per time.Duration, opts ...guard.Option) func(http.Handler) http.Handler {
	return middleware("nethttp.LimitByUser", guard.LimitByUser(user, limit, per, opts...))
}

// middleware returns the middleware of g; fn names the constructor in
// panics.
func middleware(fn string, g *guard.Guard) func(http.Handler) http.Handler {
	var (
		deny      denyHandler
		challenge challengeHandler
		route     routeFunc
	)
	g.ReadNatives(fn, &deny, &challenge, &route)
	finish := g.NeedsFinish()
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rt := r.Pattern
			if route != nil {
				rt = route(r)
			}
			ctx := r.Context()
			v := g.AdmitHTTP(ctx, r, rt, nil)
			v.WriteHTTPHeaders(w.Header())
			if !v.Proceed() {
				// A copy, so that the allowed path keeps v on the stack.
				vv := v
				switch {
				case deny != nil && vv.Outcome == guard.OutcomeDeny:
					deny(w, r, &vv)
				case challenge != nil && vv.Outcome == guard.OutcomeChallenge:
					challenge(w, r, &vv)
				default:
					Write(w, &vv)
				}
				return
			}
			if !finish {
				next.ServeHTTP(w, r)
				return
			}
			serveAndFinish(next, w, r, &v)
		})
	}
}

// serveAndFinish runs the handler with a writer that records the status
// the client gets, and finishes v with it. A handler that panics
// (http.ErrAbortHandler included) is finished as 500, and the panic goes
// on, unrecovered, to the recovery middleware or the server.
func serveAndFinish(next http.Handler, w http.ResponseWriter, r *http.Request, v *guard.Verdict) {
	ctx := r.Context()
	rw, sw := wrap(w)
	done := false
	defer func() {
		if !done {
			v.Finish(ctx, http.StatusInternalServerError)
		}
	}()
	next.ServeHTTP(rw, r)
	done = true
	v.Finish(ctx, sw.Status())
}

// Write writes the guard's answer for a request that does not proceed:
// status, content type and fixed body. Headers from v.WriteHTTPHeaders must be
// set before. Deny and challenge handlers may call it to fall back to the
// default answer.
func Write(w http.ResponseWriter, v *guard.Verdict) {
	status, body := v.Answer(w.Header().Set)
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
