// Package opshttp is an opt-in admin [http.Handler] for support staff: it
// lists the policies of an app's limiters, peeks at a key's windows and
// resets a key (unlocking a user locked out by a login limit). [NewPage]
// serves the same as a small web page.
//
// It has no authentication of its own: it serves every request through
// the app's admin check, given with [WithAuthorization], and refuses to
// start without one, since it resets limits. Mount it under a prefix
// stripped with [http.StripPrefix].
//
//	admin := opshttp.Handler([]*core.Limiter{loginLimiter, smsLimiter},
//		opshttp.WithAuthorization(requireAdmin),
//		opshttp.WithKeyer("login-account", func(id string) (string, error) {
//			return personal.AccountKey(id, personal.Secret(secret))
//		}))
//	mux.Handle("/admin/ratelimit/", http.StripPrefix("/admin/ratelimit", admin))
//
// Routes, answering JSON:
//
//	GET    /policies                    every policy: name, algorithm, rules, identifier
//	GET    /policies/{name}             one policy
//	GET    /policies/{name}/refused     the keys refused most lately (Limiter.TopRefused); ?n=1..100, 10 by default
//	GET    /policies/{name}/keys/{key}  what a request of one unit for key would get now (Limiter.Peek)
//	DELETE /policies/{name}/keys/{key}  forget everything recorded for key (Limiter.Reset); 204
//	POST   /policies/{name}/keys/{key}/grant  give key more units or an exemption for a while (Limiter.Grant); the grant
//	DELETE /policies/{name}/keys/{key}/grant  revoke key's grant (?by=who); 204
//
// A grant's body is JSON ([GrantRequest]): {"extra": 10000, "for": "24h",
// "by": "ann", "note": "launch day"}, or "exempt": true, or "until" in
// RFC 3339 instead of "for"; a body of another media type is refused
// (415), so that no cross-site form can send one. A peek shows a key's
// live grant ("grant") and whether the policy's allow or deny list decides
// the key ("listed").
//
// A peek of a key locked out (core.Policy.Lockout) says "locked": true
// and "locked_until", when the key may retry; a reset lifts the lockout
// on every instance. A peek of a key whose next request would be
// challenged (core.Rule.Challenge) says "challenged": true: it must pass
// the app's CAPTCHA or second factor, and waiting does not help. The refused route answers {"policy": ..., "keys":
// [{"key": ..., "refusals": ...}, ...]}: the stored keys the policy
// refused most in the last five minutes, summed over every instance that
// shares its store, most refused first ([WithTopRefused] replaces the
// source).
//
// HEAD is served as GET. Peeks record nothing and report nothing of their
// own.
//
// # Keys and identifiers
//
// {key} is the key as stored, as the app's key function returned it
// (an IP address, an AppKey), unless the policy has a keyer
// ([WithKeyer]): then it is the identifier support staff have, a user
// name or a phone number, and the keyer derives the stored key from it.
// Keys made by package keyfunc/personal are HMAC pseudonyms, so for
// their policies register a keyer calling [personal.AccountKey] or
// [personal.PhoneKey] with the app's options (secret, region, cleartext);
// without one, a peek of "alice" looks at a key the app never uses and a
// reset deletes nothing. The identifier field of a policy says which form
// its routes take. An identifier the keyer refuses, such as an invalid
// phone number, is answered 400 with a fixed reason
// ({"error":"invalid phone number"}).
//
// {key} is one path segment, percent-decoded: escape a '/' in it as %2F.
// The handler never redirects and never cleans the path: "." and ".."
// are keys like any other, and an empty segment is no route. An
// [http.ServeMux] in front of the handler does clean literal "." and
// ".." segments (with a redirect), and [url.PathEscape] leaves dots as
// they are, so send such keys as %2E and %2E%2E.
//
// # Errors
//
// Errors answer JSON {"error": "..."} with a fixed text: 404 for an
// unknown route ("not found") or policy ("unknown policy"), 405 with an
// Allow header for a method a route does not serve, 400 for an empty key,
// a refused identifier or a bad n, 503 for a store failure. A grant
// refused says why, without the key: 400 for its terms or a key the
// policy's lists decide, 409 while an instance of an older release that
// reads no grants uses the policy, 415 for a body that is not JSON. Answers never echo
// the key, the identifier or an error's text: the error of a store
// failure goes to the logger given with [WithLogger], without the key.
//
// # Changes
//
// Every reset, through the handler or the page, done or failed, is
// reported to the observers given with [WithObserver] as a [core.Event]
// of kind [EventReset], with the request's context (where the app's
// authorization may have put who made it), and logged by [WithLogger].
// Every grant and revocation is logged by [WithLogger] too, and by core's
// audit line (log/slog's default logger) with who, what and until when.
//
// # The operations page
//
// [NewPage] returns a page, rendered on the server from a template
// embedded in the binary, with its style inline and no script, where
// support looks a value up under every policy: an IP, an account or a
// phone number (through the policy's keyer, as the JSON routes take it)
// or a stored key such as a pseudonym. For each policy it shows whether a
// request would pass, each rule's usage with when its window is empty
// again, the lockout and when it ends, and a calendar rule's period with
// its start and end in the rule's time zone; a button resets the key
// (which lifts its lockout). Each policy also lists the 10 keys it
// refused most in the last five minutes, over every instance
// ([core.Limiter.TopRefused], or the source of [WithTopRefused]), each
// linked to its lookup: as stored, or as an identifier when the policy's
// keyer derives the key from itself (an account or a phone number kept in
// clear); pseudonyms stay pseudonyms. Routes, under the page's prefix:
//
//	GET  /        the page; ?q=VALUE looks VALUE up (&as=key: as a stored key)
//	POST /reset   reset: form fields policy, q, as and csrf; 303 back to the lookup,
//	              which says the reset was made (only to the browser that made it)
//
// The page refuses to start without [WithAuthorization]. Looking changes
// nothing; a reset is a POST that must carry the form token of the
// page's cookie (ratekit_ops_csrf, HttpOnly, SameSite=Strict) and, from a
// browser, come from the page's own origin ([http.CrossOriginProtection]),
// or it is refused with 403. A value is at most 1024 bytes, a query 4096
// and a form 4096; anything longer or malformed is answered 4xx with its
// reason on the page. Keys are shown escaped, and the page's
// Content-Security-Policy allows no script, frame or outside resource.
//
// [personal.AccountKey]: https://pkg.go.dev/github.com/ratekit/ratekit/keyfunc/personal#AccountKey
// [personal.PhoneKey]: https://pkg.go.dev/github.com/ratekit/ratekit/keyfunc/personal#PhoneKey
package opshttp
