// Package guard is the request pipeline every ratekit adapter shares, and
// the options they all take.
//
// A [Guard] wraps a [core.Limiter] with what a middleware needs around a
// decision: which requests are skipped ([WithSkip]), who is limited
// ([WithKey]), what a request costs ([WithCost]), further limits decided
// together ([WithAlso]), count-only-failures refunds and resets
// ([WithCountIf], [WithResetIf]), dry-run mode, and what the answer means:
// the status, the rate-limit header fields ([WithHeaders]) and the body
// ([WithBody]). The adapters (nethttp, ginlimit, echolimit, fiberlimit,
// grpclimit) only translate their framework's request into a
// [keyfunc.Request] and write the [Verdict] back the framework's way, so a
// guard option works the same in every one of them:
//
//	r.POST("/login", ginlimit.New(login,
//		guard.WithKey(keyfunc.ClientIP(keyfunc.TrustedProxies("10.0.0.0/8"))),
//		guard.WithCountIf(guard.StatusAuthFailure),
//	), loginHandler)
//
// # One line for the common cases
//
// [LimitByIP], [LimitByAppKey] and [LimitByUser] build the limiter too: a
// rate, limit requests per window, for each client IP, API key or user.
// Every adapter has functions of the same names that return its
// middleware, so that the common cases take one import and one line:
//
//	mux.Handle("GET /hello", nethttp.LimitByIP(100, time.Minute)(hello))
//	r.Use(ginlimit.LimitByIP(100, time.Minute))
//
// Each is a limit of its own, on every store. They count in memory unless
// [UseStore] gives a store to all (at start-up:
// ginlimit.UseStore(redisstore.New(rdb)), and every instance counts
// together) or [WithStore] to one, under a policy named after the rate,
// "<by>-<limit>-per-<window>" with an ordinal from the second one-liner of
// a rate on, unless [WithName] names it, and take every other option as
// [New] does. Several rules, lockouts, tiers and
// calendar quotas are a core.Policy given to core.NewLimiter, and the
// limiter given to New.
//
// # Answers
//
//	outcome                         HTTP                        gRPC
//	admitted                        handler runs, headers set   handler runs, metadata set
//	over the limit                  429, Retry-After, headers   ResourceExhausted + RetryInfo
//	no key (anonymous)              skipped by default          the same
//	malformed key source or cost    400 with a fixed reason     InvalidArgument
//	body too long for the key       413 Content Too Large       InvalidArgument
//	store failed under FailClosed   503 (not 429)               Unavailable
//	challenged (Rule.Challenge)     429, no Retry-After         Unauthenticated + ErrorInfo
//
// Bodies are fixed texts, or with [WithBody]([BodyProblem]) RFC 9457
// application/problem+json documents for every refusal (429, 400, 413 and
// 503 alike); an error's detail never reaches the client. A challenge
// ([OutcomeChallenge]: ask for a CAPTCHA or a second factor, then record
// the pass with core.Limiter.Pass) is always a problem+json document of
// type [ChallengeProblemType]; each adapter's WithChallengeHandler answers
// it the app's way instead.
//
// # After the handler
//
// With [WithCountIf] or [WithResetIf] the adapters call [Verdict.Finish]
// with the status the client got. A handler that panics (including
// http.ErrAbortHandler) is finished as 500 (gRPC: codes.Internal), so its
// units are refunded or kept as the count-if function says for a 500,
// and the panic goes on unchanged to the recovery middleware or server
// that handles it. A guard with a concurrency limit (core.Policy.InFlight,
// its own or added with [WithAlso]) is always finished: Finish releases
// the request's leases whatever the status, and only once.
//
// # Keys
//
// Without [WithKey] the key is the peer address ([keyfunc.ClientIP] with no
// trusted proxies): behind a reverse proxy that puts every client in one
// bucket, so configure trusted proxies.
//
// # Outgoing calls
//
// Adapters that throttle the calls an app makes (nethttp.Transport,
// grpclimit's client interceptors) run [Guard.Wait] instead of Admit: the
// same skip, key and cost, but a request over the limit waits for its turn
// rather than being refused. Their default key is where the call goes.
package guard
