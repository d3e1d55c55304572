// Package nethttp plugs ratekit into net/http as
// func(http.Handler) http.Handler middleware. The common cases take one
// line, a rate per client IP, API key or user:
//
//	mux.Handle("GET /hello", nethttp.LimitByIP(100, time.Minute)(hello))
//	mux.Handle("GET /api/", nethttp.LimitByAppKey(1000, time.Hour)(api))
//	mux.Handle("GET /reports", authenticate(nethttp.LimitByUser(userKey{}, 50, time.Minute)(reports)))
//
// They count in memory; [UseStore](redisstore.New(rdb)) at start-up
// shares the counts of every instance through Redis. Anything else is a
// [core.Limiter] given to [New]:
//
//	mux.Handle("POST /login", nethttp.New(login, guard.WithKey(keyfunc.ClientIP()))(loginHandler))
//
// It takes every [guard] option (key, skip, cost, count-if, headers,
// body, …) plus [WithDenyHandler], [WithChallengeHandler] (a policy's
// core.Rule.Challenge) and [WithRoute]. Allowed and denied
// responses carry X-RateLimit-Limit, X-RateLimit-Remaining and
// X-RateLimit-Reset (or the IETF RateLimit fields, see guard.WithHeaders);
// denials are 429 Too Many Requests with Retry-After. A key function that
// finds no key skips the limiter; a malformed key source is a 400, a body
// longer than the key function may read a 413. Key functions read at most
// their limit (plus one byte) of r.Body, as it is: behind a middleware
// that decompresses request bodies, at most that much is inflated.
//
// The middleware works with any router built on net/http. With chi, pass
// the pattern chi matched with [WithRoute]
// (chi.RouteContext(r.Context()).RoutePattern()) and add the middleware
// with r.With or inside r.Group, which run after chi has matched the
// route: under the top-level r.Use the pattern is not known yet, and
// keyfunc.Route refuses the request rather than key it by its path. Per
// user limits go after the authentication middleware, keyed by
// keyfunc.UserIDFrom (see the examples).
//
// Without guard.WithKey the key is the peer address: behind a reverse
// proxy that puts every client in one bucket, so configure
// keyfunc.TrustedProxies.
//
// # Count-if and reset-if
//
// With guard.WithCountIf or guard.WithResetIf the handler writes through a
// wrapper that records the final status the client gets, for
// guard.Verdict.Finish (without them the handler gets w itself). The
// wrapper has exactly the optional interfaces of w among http.Flusher,
// http.Hijacker, io.ReaderFrom and http.Pusher, and unwraps for
// http.ResponseController. 1xx informational responses (103 Early Hints)
// are not final; 101 Switching Protocols is; the first final status
// written is the one recorded, as net/http ignores later ones; a body
// written, read from or flushed with no status is 200. A hijacked
// connection counts as the final status written before the hijack, if
// any, else as 101 Switching Protocols: what the handler writes on the raw
// connection is not seen. A handler that panics (http.ErrAbortHandler
// included) is finished as 500, and the panic goes on to the recovery
// middleware or the server.
//
// # In flight
//
// Under a concurrency limit (core.Policy.InFlight) a request is in flight
// from its admission until the handler returns (next.ServeHTTP), however
// it ends; its lease is released then. net/http writes the body while the
// handler runs, so it has left by then but for what net/http still
// buffers. A hijacked connection (a WebSocket upgrade) counts until the
// handler returns, not until the connection closes: a handler that hands
// the connection to another goroutine and returns ends its request.
//
// # Outgoing requests
//
// [Transport] throttles the requests an app sends rather than those it
// serves: an http.RoundTripper whose requests wait until they fit the
// limit, for calls to a provider that allows so many per second across
// the whole fleet. By default each host has its own key:
//
//	client := &http.Client{Transport: nethttp.Transport(provider, nil)}
package nethttp
