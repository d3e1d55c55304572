// Package echolimit plugs a ratekit [core.Limiter] into echo v4 as an
// echo.MiddlewareFunc. One line limits a route, a group or the whole app:
//
//	e.POST("/sms", sendSMS, echolimit.New(sms, guard.WithKey(personal.Phone(personal.DefaultRegion("CN")))))
//	api := e.Group("/api", echolimit.New(quota, guard.WithKey(keyfunc.AppKey())))
//	e.Use(echolimit.New(global))
//
// Allowed and denied responses carry X-RateLimit-Limit,
// X-RateLimit-Remaining and X-RateLimit-Reset (or the IETF RateLimit
// fields, see guard.WithHeaders); denials are 429 Too Many Requests with
// Retry-After. A key function that finds no key skips the limiter; a
// malformed key source is a 400. The decision, headers and bodies come
// from the [guard] pipeline shared by every ratekit adapter, whose
// options this package takes as they are.
//
// Denials are written directly, not returned as *echo.HTTPError: the
// app's HTTPErrorHandler would render them its own way (JSON
// {"message": ...} by default) and the answer would differ from the other
// adapters'. To go through the error handler anyway, return an
// *echo.HTTPError from a [WithDenyHandler].
//
// With guard.WithCountIf the status is taken after the handler: when it
// returns an error without writing a response, echo has not answered yet,
// so the status is the *echo.HTTPError's code, else 500.
//
// Key functions see the request through keyfunc.FromHTTPWithValues: the
// route is c.Path(), the context is c.Request().Context(), and
// keyfunc.Request.Value finds values the app stored with c.Set (string
// keys).
//
// Without guard.WithKey the key is the peer address: behind a reverse proxy
// that puts every client in one bucket, so configure
// keyfunc.TrustedProxies. echo's IPExtractor (c.RealIP) is not used.
package echolimit
