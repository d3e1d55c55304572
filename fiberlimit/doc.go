// Package fiberlimit plugs a ratekit [core.Limiter] into fiber v2 as a
// fiber.Handler, natively on fasthttp (not through adaptor.HTTPMiddleware,
// which copies every request). One line limits a route, a group or the
// whole app:
//
//	app.Post("/login", fiberlimit.New(login, guard.WithKey(keyfunc.ClientIP())), loginHandler)
//	api := app.Group("/api", fiberlimit.New(quota, guard.WithKey(keyfunc.AppKey())))
//	app.Use(fiberlimit.New(global))
//
// Allowed and denied responses carry X-RateLimit-Limit,
// X-RateLimit-Remaining and X-RateLimit-Reset (or the IETF RateLimit
// fields, see guard.WithHeaders); denials are 429 Too Many Requests with
// Retry-After. A key function that finds no key skips the limiter; a
// malformed key source is a 400. The decision, headers and bodies come
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
//   - With guard.WithCountIf, when the handler returns an error fiber has not
//     answered yet, so the status is the *fiber.Error's code, else 500
//     (fiber issue #1685). A custom ErrorHandler that maps errors to other
//     statuses is not seen.
//   - The route is c.Route().Path: the route pattern for a route-level
//     middleware, the mount prefix under app.Use or app.Group.
//   - keyfunc.Request.Body is the body fasthttp already read, bounded by
//     the app's BodyLimit.
//
// Without guard.WithKey the key is the peer address: behind a reverse proxy
// that puts every client in one bucket, so configure
// keyfunc.TrustedProxies.
package fiberlimit
