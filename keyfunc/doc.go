// Package keyfunc says who a rate limit counts: a [Func] turns a request
// into the key that a limiter counts under.
//
// Key functions read a small framework-neutral [Request] view. ratekit's
// adapters build it for gin, echo, fiber, net/http and gRPC; [FromHTTP]
// builds it for an *http.Request.
//
//   - [ClientIP]: the client address; IPv6 clients grouped by /64, and
//     IPv4 clients seen through IPv6 (NAT64, 6to4, Teredo) keyed by their
//     IPv4 address.
//   - [UserID], [UserIDFrom]: the authenticated user, as set by the
//     application's authentication middleware.
//   - [AppKey]: an API key from a header or query parameter.
//   - personal.Phone and personal.Account, in package
//     [github.com/ratekit/ratekit/keyfunc/personal]: a phone number,
//     normalised to E.164, for SMS and verification-code throttling, and
//     the account a login names, for login anti-bruteforce.
//   - [Header], [Query], [Route]: a header, a query parameter, or the
//     endpoint itself (its route pattern as registered, never the raw
//     path, nor a method the client chose).
//   - [Join]: several of these at once, such as the client IP per route.
//
// A request without a key (an anonymous user when keying by user ID) is
// [ErrNoKey]; the middleware's policy decides what happens, by default
// skipping that limiter, so pair such limiters with one keyed by
// [ClientIP]. A key source that is present but malformed — an unparseable
// phone number, a peer address that is not an address, a trusted proxy's
// forwarding header that names no client — is an error wrapping
// [ErrInvalidKey], which adapters answer with 400 Bad Request; a body
// longer than a key function reads also wraps [ErrBodyTooLarge], answered
// 413 Content Too Large. Key functions never panic on request input;
// constructors panic on invalid options, like [regexp.MustCompile].
//
// # Trust model for ClientIP
//
// Any client can send X-Forwarded-For, X-Real-IP or Forwarded headers with
// any content, so a limiter that believes them can be walked around by
// inventing a new address for every request. [ClientIP] therefore keys by
// the address of the TCP peer and reads no header unless told which peers
// are proxies that you run or pay for ([TrustedProxies], [TrustedPrefixes]).
//
// From a trusted peer it reads exactly one header: the one your proxies
// maintain, X-Forwarded-For unless [ForwardingHeader] names another (RFC
// 7239 Forwarded, or a single-address header such as X-Real-IP). Every
// other forwarding header is ignored, because a proxy passes the headers
// it does not maintain through from the client unchecked: nginx, as
// usually configured ($proxy_add_x_forwarded_for), appends to
// X-Forwarded-For and forwards a client's own Forwarded header as it came.
// Reading both, or falling back from one to the other, would let that
// client choose its key, or push it into the proxy's own bucket.
//
// The header is read from the right, the end that the proxies nearest to
// this server wrote: each address that is itself a trusted proxy is
// skipped, and the first untrusted address is the client. Whatever a
// client wrote further to the left is never reached.
//
// A trusted proxy's address becomes the key only when the request came
// from that proxy itself: it sent no such header, or the header holds
// only trusted addresses, and then the leftmost of them, the host that
// sent the request, is the key. A health check from the load balancer is
// keyed by the load balancer. When the header holds something that is not
// an address next to the trusted hops — garbage, "unknown", an RFC 7239
// obfuscated identifier — nobody has said who the client is, and
// ClientIP returns an error wrapping [ErrInvalidKey] (400 Bad Request),
// rather than count that client in the bucket that the proxy and all its
// clients share. Behind proxies that maintain the header this does not
// happen, since the hop next to the trusted ones is always an address
// that a proxy appended; when it does, a proxy is misconfigured, and the
// error says so.
//
// Name only the header that every trusted proxy appends to or overwrites:
// a proxy that passes the named header through lets its clients choose
// their keys, and nothing on this side can tell. Behind a proxy without
// trusted proxies configured, every client shares the proxy's address,
// and so one bucket: configure the proxies.
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
// most [MaxValueLen] bytes, and key functions that read a body do so
// through [Request.Body], which bounds it. The limiter hashes long keys,
// so nothing a client sends is stored unbounded.
package keyfunc
