// Package echolimit plugs ratekit into echo v4 as an
// echo.MiddlewareFunc. One line limits a route, a group or the whole app;
// the common cases are a rate per client IP, API key or user (after the
// authentication middleware that calls c.Set("user", id)):
//
//	e.Use(echolimit.LimitByIP(100, time.Minute))
//	api := e.Group("/api", echolimit.LimitByAppKey(1000, time.Hour))
//	reports := e.Group("/reports", auth, echolimit.LimitByUser("user", 50, time.Minute))
//
// They count in memory; [UseStore](redisstore.New(rdb)) at start-up
// shares the counts of every instance through Redis. Anything else is a
// [core.Limiter] given to [New]:
//
//	e.POST("/sms", sendSMS, echolimit.New(sms, guard.WithKey(personal.Phone(personal.DefaultRegion("CN")))))
//	api := e.Group("/api", echolimit.New(quota, guard.WithKey(keyfunc.AppKey())))
//	e.Use(echolimit.New(global))
//
// Allowed and denied responses carry X-RateLimit-Limit,
// X-RateLimit-Remaining and X-RateLimit-Reset (or the IETF RateLimit
// fields, see guard.WithHeaders); denials are 429 Too Many Requests with
// Retry-After. A key function that finds no key skips the limiter; a
// malformed key source is a 400, a body longer than the key function may
// read a 413 (at most that much is read from the request body, behind
// echo's Decompress middleware too). The decision, headers and bodies come
// from the [guard] pipeline shared by every ratekit adapter, whose
// options this package takes as they are.
//
// Denials are written directly, not returned as *echo.HTTPError: the
// app's HTTPErrorHandler would render them its own way (JSON
// {"message": ...} by default) and the answer would differ from the other
// adapters'. To go through the error handler anyway, return an
// *echo.HTTPError from a [WithDenyHandler] (or, for a challenge, a
// [WithChallengeHandler]).
//
// With guard.WithCountIf (or guard.WithResetIf) the status is the one the
// client gets: when the rest of the chain returns an error, the
// middleware hands it to the app's HTTPErrorHandler itself (c.Error), as
// echo's RequestLogger does with HandleError, reads the status it
// rendered, and returns nil so that echo does not render it twice. A
// custom error handler that maps an app error to 401 is therefore
// counted as a 401; middleware registered before this one sees nil
// instead of the error, and the response already written. A handler that
// panics is finished as 500, and the panic goes on to the Recover
// middleware.
//
// Key functions see the request through keyfunc.FromHTTPWithValues: the
// route is c.Path(), the context is c.Request().Context(), and
// keyfunc.Request.Value finds values the app stored with c.Set (string
// keys).
//
// Without guard.WithKey the key is the peer address: behind a reverse proxy
// that puts every client in one bucket, so configure
// keyfunc.TrustedProxies. echo's IPExtractor (c.RealIP) is not used.
//
// # In flight
//
// Under a concurrency limit (core.Policy.InFlight) a request is in flight
// from its admission until the rest of the chain returns and its error, if
// any, is rendered; its lease is released then, however it ends. echo
// writes the body while the handler runs (c.Stream too), so it has left
// by then but for what net/http still buffers. A hijacked connection (a
// WebSocket upgrade) counts until the handler returns, not until the
// connection closes: a handler that hands the connection to another
// goroutine and returns ends its request.
package echolimit
