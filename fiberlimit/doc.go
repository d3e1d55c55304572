// Package fiberlimit plugs ratekit into fiber v2 as a fiber.Handler,
// natively on fasthttp (not through adaptor.HTTPMiddleware, which copies
// every request). One line limits a route, a group or the whole app; the
// common cases are a rate per client IP, API key or user (after the
// authentication middleware that calls c.Locals("user", id)):
//
//	app.Use(fiberlimit.LimitByIP(100, time.Minute))
//	api := app.Group("/api", fiberlimit.LimitByAppKey(1000, time.Hour))
//	reports := app.Group("/reports", auth, fiberlimit.LimitByUser("user", 50, time.Minute))
//
// They count in memory; [UseStore](redisstore.New(rdb)) at start-up
// shares the counts of every instance through Redis. Anything else is a
// [core.Limiter] given to [New]:
//
//	app.Post("/login", fiberlimit.New(login, guard.WithKey(keyfunc.ClientIP())), loginHandler)
//	api := app.Group("/api", fiberlimit.New(quota, guard.WithKey(keyfunc.AppKey())))
//	app.Use(fiberlimit.New(global))
//
// Allowed and denied responses carry X-RateLimit-Limit,
// X-RateLimit-Remaining and X-RateLimit-Reset (or the IETF RateLimit
// fields, see guard.WithHeaders); denials are 429 Too Many Requests with
// Retry-After. A key function that finds no key skips the limiter; a
// malformed key source is a 400, a body longer than the key function may
// read a 413. The decision, headers and bodies come
// from the [guard] pipeline shared by every ratekit adapter, whose
// options this package takes as they are.
//
// Fiber quirks, handled here:
//   - fiber's strings point into buffers reused after the handler, so the
//     request view hands key functions copies, never zero-copy strings.
//   - The peer address is the TCP peer, not c.IP(), which may trust
//     fiber's ProxyHeader from anyone; keyfunc.ClientIP honours forwarding
//     headers only from its trusted proxies.
//   - The context is c.UserContext(); keyfunc.Request.Value looks in
//     c.Locals first.
//   - With guard.WithCountIf (or guard.WithResetIf), when the rest of the
//     chain returns an error fiber has not answered yet (fiber issue
//     #1685): the middleware hands it to the app's ErrorHandler itself
//     (c.App().ErrorHandler, which finds a mounted app's), as fiber's
//     logger middleware does, reads the status it rendered, and returns
//     nil so that it is not rendered twice. A custom ErrorHandler that
//     maps an app error to 401 is therefore counted as a 401; middleware
//     registered before this one sees nil instead of the error. A handler
//     that panics is finished as 500, and the panic goes on to the
//     recover middleware.
//   - The route is c.Route().Path: the route pattern for a route-level
//     middleware, the mount prefix under app.Use or app.Group.
//   - keyfunc.Request.Body is the body as c.Body() gives the handler:
//     decoded when Content-Encoding names gzip, deflate or br, as fiber
//     decodes it, but never more than the key function's limit plus one
//     byte at each step, so a small compressed body cannot make the
//     middleware inflate megabytes (c.Body() itself inflates without
//     bound). The raw body is what fasthttp already read, bounded by the
//     app's BodyLimit. A body its Content-Encoding cannot decode is a
//     400, where c.Body() would hand the handler the decoder's error
//     text.
//
// Without guard.WithKey the key is the peer address: behind a reverse proxy
// that puts every client in one bucket, so configure
// keyfunc.TrustedProxies.
//
// # In flight
//
// Under a concurrency limit (core.Policy.InFlight) a request is in flight
// from its admission until its response has left, and its lease is
// released then, however it ends:
//   - a body in memory (c.SendString, c.JSON, ...): until the handler
//     chain returns, fasthttp writing it at once after;
//   - a streamed body (c.Context().SetBodyStreamWriter, c.SendStream,
//     c.SendFile), which fasthttp writes after the chain returns: until
//     it is written in full, or the connection fails (a client gone
//     mid-body);
//   - a hijacked connection (c.Context().Hijack): until the hijack
//     handler returns.
//
// The middleware hands fasthttp a request value (RequestCtx.SetUserValue)
// whose Close finishes the verdict: fasthttp closes such values when it
// lets go of the request, after the response or the hijack.
package fiberlimit
