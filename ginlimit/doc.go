// Package ginlimit plugs ratekit into gin as a gin.HandlerFunc. One line
// limits a route, a group or the whole engine; the common cases are a rate
// per client IP, API key or user (after the authentication middleware
// that calls c.Set("user", id)):
//
//	r.Use(ginlimit.LimitByIP(100, time.Minute))
//	api := r.Group("/api", ginlimit.LimitByAppKey(1000, time.Hour))
//	authed := r.Group("/", auth, ginlimit.LimitByUser("user", 50, time.Minute))
//
// They count in memory; [UseStore](redisstore.New(rdb)) at start-up
// shares the counts of every instance through Redis. Anything else is a
// [core.Limiter] given to [New]:
//
//	r.POST("/login", ginlimit.New(login, guard.WithKey(keyfunc.ClientIP())), loginHandler)
//	api := r.Group("/api", ginlimit.New(quota, guard.WithKey(keyfunc.AppKey())))
//	r.Use(ginlimit.New(global))
//
// It takes every [guard] option plus [WithDenyHandler] and
// [WithChallengeHandler] (a policy's core.Rule.Challenge). Allowed and denied
// responses carry X-RateLimit-Limit, X-RateLimit-Remaining and
// X-RateLimit-Reset (or the IETF RateLimit fields, see guard.WithHeaders);
// denials are 429 Too Many Requests with Retry-After, and abort the chain.
// A key function that finds no key skips the limiter; a malformed key
// source is a 400, a body longer than the key function may read a 413
// (at most that much is read from c.Request.Body, decompressed or not).
// With guard.WithCountIf a handler that panics is finished as 500, and the
// panic goes on to gin's Recovery middleware. The decision, headers and bodies come from the shared
// [guard] pipeline, so a gin app answers exactly as a net/http, echo or
// fiber one.
//
// Key functions see the request through keyfunc.FromHTTPWithValues: the
// route is c.FullPath(), the context is c.Request.Context() (never the
// *gin.Context, whose Done is nil without ContextWithFallback), and
// keyfunc.Request.Value finds values the app stored with c.Set.
//
// Without guard.WithKey the key is the peer address: behind a reverse proxy
// that puts every client in one bucket, so configure
// keyfunc.TrustedProxies. gin's own trusted-proxy settings (c.ClientIP)
// are not used.
//
// # In flight
//
// Under a concurrency limit (core.Policy.InFlight) a request is in flight
// from its admission until the rest of the chain returns (c.Next), however
// it ends; its lease is released then. gin writes the body while the
// handler runs (c.Stream too), so the body has left by then but for what
// net/http still buffers. A hijacked connection (a WebSocket upgrade)
// counts until the handler returns, not until the connection closes: a
// handler that hands the connection to another goroutine and returns
// ends its request.
package ginlimit
