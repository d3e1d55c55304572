// Package nethttp plugs a ratekit [core.Limiter] into net/http as
// func(http.Handler) http.Handler middleware:
//
//	mux.Handle("POST /login", nethttp.New(login, nethttp.WithKey(keyfunc.ClientIP()))(loginHandler))
//
// Allowed and denied responses carry X-RateLimit-Limit,
// X-RateLimit-Remaining and X-RateLimit-Reset (or the IETF RateLimit
// fields, see [WithHeaders]); denials are 429 Too Many Requests with
// Retry-After. A key function that finds no key skips the limiter; a
// malformed key source is a 400. The decision, headers and bodies come
// from [core.Guard], shared by every ratekit adapter.
//
// Without [WithKey] the key is the peer address: behind a reverse proxy
// that puts every client in one bucket, so configure
// keyfunc.TrustedProxies.
package nethttp
