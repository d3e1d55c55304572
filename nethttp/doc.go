// Package nethttp plugs a ratekit [core.Limiter] into net/http as
// func(http.Handler) http.Handler middleware:
//
//	mux.Handle("POST /login", nethttp.New(login, guard.WithKey(keyfunc.ClientIP()))(loginHandler))
//
// It takes every [guard] option (key, skip, cost, count-if, headers,
// body, …) plus [WithDenyHandler] and [WithRoute]. Allowed and denied
// responses carry X-RateLimit-Limit, X-RateLimit-Remaining and
// X-RateLimit-Reset (or the IETF RateLimit fields, see guard.WithHeaders);
// denials are 429 Too Many Requests with Retry-After. A key function that
// finds no key skips the limiter; a malformed key source is a 400.
//
// The middleware works with any router built on net/http. Routers that
// know the matched route only after routing, such as chi, go either on
// the route (r.With(mw)) or pass their route pattern with [WithRoute].
//
// Without guard.WithKey the key is the peer address: behind a reverse
// proxy that puts every client in one bucket, so configure
// keyfunc.TrustedProxies.
package nethttp
