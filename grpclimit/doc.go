// Package grpclimit limits gRPC servers with ratekit: unary and stream
// server interceptors that run the shared [guard] pipeline and answer
// the gRPC way.
//
// The common cases are a rate per client IP, API key (x-api-key
// metadata) or user, unary calls and streams alike:
//
//	lim := grpclimit.LimitByIP(100, time.Minute)
//	grpc.NewServer(
//		grpc.ChainUnaryInterceptor(lim.UnaryServerInterceptor()),
//		grpc.ChainStreamInterceptor(lim.StreamServerInterceptor()))
//
// They count in memory; [UseStore](redisstore.New(rdb)) at start-up
// shares the counts of every instance through Redis. Anything else is a
// [core.Limiter], one line per policy:
//
//	grpc.NewServer(grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(limiter)))
//
// Scope an interceptor to some methods with [WithMethods], or give methods
// their own limiters with a [Router]:
//
//	r := grpclimit.NewRouter(apiLimiter, map[string]*core.Limiter{
//		"/auth.v1.Auth/Login":   loginLimiter,
//		"/auth.v1.Auth/Version": nil, // not limited
//	}, guard.WithKey(keyfunc.ClientIP()))
//	grpc.NewServer(
//		grpc.ChainUnaryInterceptor(r.UnaryServerInterceptor()),
//		grpc.ChainStreamInterceptor(r.StreamServerInterceptor()),
//	)
//
// # Health and reflection
//
// The server interceptors do not limit the health service
// (grpc.health.v1.Health) nor server reflection
// (grpc.reflection.v1.ServerReflection and v1alpha): their calls pass
// untouched, with no decision and no metadata, so that load balancers'
// and Kubernetes' probes are never refused and grpcurl, which asks
// reflection before each call, spends nothing of a client's budget.
// [WithHealthAndReflection](true) limits them as any other method, and so
// does naming one with [WithMethods] or as a route of [NewRouter].
//
// # Answers
//
// Every call the guard decides on gets rate-limit response header metadata
// (x-ratelimit-limit, x-ratelimit-remaining, x-ratelimit-reset by default;
// ratelimit-policy and ratelimit with [guard.HeadersIETF]), whether it is
// allowed or not. When an interceptor earlier in the chain has already
// sent the headers, the same fields go in the trailer metadata instead. A call that does not proceed ends before the handler
// with a status whose message is a fixed text; no error detail ever
// reaches the client:
//
//   - over the limit: codes.ResourceExhausted, a retry-after header, and
//     the status details errdetails.RetryInfo (the exact wait) and
//     errdetails.QuotaFailure (the policy name and the violated rule,
//     never the key);
//   - malformed key, or no key under [guard.NoKeyReject]:
//     codes.InvalidArgument;
//   - store failed under [core.FailClosed]: codes.Unavailable, with
//     RetryInfo when the limiter knows when to try again;
//   - the call's context ended before a decision: codes.Canceled or
//     codes.DeadlineExceeded, as gRPC itself reports it;
//   - challenged (core.Rule.Challenge: the key must answer a CAPTCHA or a
//     second factor, and [core.Limiter.Pass] records that it did):
//     codes.Unauthenticated, with no retry-after and the status detail
//     errdetails.ErrorInfo of reason [ChallengeReason] in domain
//     "ratekit", naming the policy. Unauthenticated because the
//     client must bring more proof of who it is, as it would bring
//     credentials, and waiting or retrying as it is does not help:
//     clients and gRPC retry policies that back off and retry on
//     ResourceExhausted would only be challenged again.
//
// [WithDenyHandler] replaces the ResourceExhausted status,
// [WithChallengeHandler] the Unauthenticated one.
//
// With [WithCountIf] or [WithResetIf] a handler that panics is finished
// as codes.Internal, and the panic goes on to a recovery interceptor.
//
// # Keys
//
// The default key is [keyfunc.ClientIP] with no trusted proxies: the
// peer's IP address. Behind a proxy or a load balancer that terminates
// connections, every client then shares one bucket; configure trusted
// proxies or key by something else, such as metadata (guard.WithKey). Over a
// Unix socket or an in-memory listener (bufconn) the peer has no IP
// address, so the default key fails and every call is answered
// codes.InvalidArgument: choose another key there. Key
// functions see a [keyfunc.Request] whose headers are the call's incoming
// metadata (names are matched in lowercase) and whose route is the full
// method name; see [Request].
//
// # Streams
//
// A stream is charged once, when it opens, before the handler runs; the
// messages it carries are not counted. A refused stream ends with its
// status before any message: the client sees it on its first Recv.
//
// # In flight
//
// Under a concurrency limit (core.Policy.InFlight) a unary call is in
// flight from its admission until its handler returns, and a stream from
// its opening until its handler returns, which ends the stream, however
// long it runs and however many messages it carries; the lease is
// released then, however the call ends (an error, a panic, a cancelled
// context).
//
// # Clients
//
// [UnaryClientInterceptor] and [StreamClientInterceptor] throttle the
// calls a client makes rather than those a server answers: a call waits
// until it fits the limit, for a partner that allows so many calls per
// second across the whole fleet. By default each connection target has its
// own key:
//
//	grpc.NewClient(target,
//		grpc.WithChainUnaryInterceptor(grpclimit.UnaryClientInterceptor(partner)),
//		grpc.WithChainStreamInterceptor(grpclimit.StreamClientInterceptor(partner)))
package grpclimit
