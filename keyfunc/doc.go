// Package keyfunc says who a rate limit counts: a [Func] turns a request
// into the key that a limiter counts under.
//
// Key functions read a small framework-neutral [Request] view. ratekit's
// adapters build it for gin, echo, fiber, net/http and gRPC; [FromHTTP]
// builds it for an *http.Request.
//
//   - [ClientIP]: the client address; IPv6 clients grouped by /64.
//   - [UserID], [UserIDFrom]: the authenticated user, as set by the
//     application's authentication middleware.
//   - [AppKey]: an API key from a header or query parameter.
//   - personal.Phone and personal.Account, in package
//     [github.com/ratekit/ratekit/keyfunc/personal]: a phone number,
//     normalised to E.164, for SMS and verification-code throttling, and
//     the account a login names, for login anti-bruteforce.
//   - [Header], [Query], [Route]: a header, a query parameter, or the
//     endpoint itself.
//   - [Join]: several of these at once, such as the client IP per route.
//
// A request without a key (an anonymous user when keying by user ID) is
// [ErrNoKey]; the middleware's policy decides what happens, by default
// skipping that limiter, so pair such limiters with one keyed by
// [ClientIP]. A key source that is present but malformed — an unparseable
// phone number, an oversized body, a peer address that is not an address —
// is an error wrapping [ErrInvalidKey], which adapters answer with 400 Bad
// Request. Key functions never panic on request input; constructors panic
// on invalid options, like [regexp.MustCompile].
//
// # Trust model for ClientIP
//
// Any client can send X-Forwarded-For, X-Real-IP or Forwarded headers with
// any content, so a limiter that believes them can be walked around by
// inventing a new address for every request. [ClientIP] therefore keys by
// the address of the TCP peer and reads no header unless told which peers
// are proxies that you run or pay for ([TrustedProxies], [TrustedPrefixes]).
//
// When the peer is trusted, the forwarding headers are read from the right,
// the end that the proxies nearest to this server appended: each address
// that is itself a trusted proxy is skipped, and the first untrusted
// address is the client. Whatever a client wrote further to the left is
// never reached. A hop that is malformed, "unknown" or obfuscated ends the
// walk at the nearest trusted hop, so garbage never becomes a key. Your
// proxies must append to (or overwrite) the header that ClientIP reads;
// when a request carries both Forwarded and X-Forwarded-For and the two
// disagree, ClientIP believes neither and keys by the peer.
//
// Behind a proxy without trusted proxies configured, every client shares
// the proxy's address, and so one bucket: configure the proxies.
//
// # Personal data
//
// Phone numbers and account names are personal data, and parsing them
// takes large libraries (github.com/nyaruka/phonenumbers,
// golang.org/x/text). Their key functions therefore live in package
// [github.com/ratekit/ratekit/keyfunc/personal], which only applications
// that key by them import. Its keys are pseudonyms (an HMAC of the
// normalised value) by default, so a dump of Redis reveals no numbers or
// names, and it reads the value wherever common handlers look for it, so
// that moving the value elsewhere does not slip past the limit.
//
// # Key size
//
// Keys taken verbatim from a request ([Header], [Query], [AppKey]) are at
// most [MaxKeyLen] bytes, and key functions that read a body do so
// through [Request.Body], which bounds it. The limiter hashes long keys,
// so nothing a client sends is stored unbounded.
package keyfunc
