package grpclimit

import (
	"context"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"

	"github.com/ratekit/ratekit/guard"
)

// methods, denyHandler and challengeHandler are this package's own
// settings, carried by guard.Native.
type (
	methods             []string
	denyHandler         func(ctx context.Context, v *guard.Verdict) error
	challengeHandler    func(ctx context.Context, v *guard.Verdict) error
	healthAndReflection bool
)

// config is what the interceptors read from their options.
type config struct {
	methods   map[string]struct{} // nil: every method
	deny      denyHandler
	challenge challengeHandler
	infra     healthAndReflection // limit the health service and reflection
}

// newConfig reads this package's own settings from g, a guard built with
// the options; it panics on an option of another adapter.
func newConfig(fn string, g *guard.Guard) config {
	var (
		c    config
		sets []methods
	)
	g.ReadNatives("grpclimit."+fn, &sets, &c.deny, &c.challenge, &c.infra)
	for _, ms := range sets {
		for _, m := range ms {
			if c.methods == nil {
				c.methods = make(map[string]struct{})
			}
			c.methods[m] = struct{}{}
		}
	}
	return c
}

// WithCountIf counts a call only when count is true for the status code
// the handler returned (codes.OK for a nil error, the code of a status
// error, Canceled or DeadlineExceeded for context errors, Unknown for any
// other error; for a stream, the code it ended with). The unit is reserved
// before the handler, so concurrent calls cannot overshoot, and refunded
// afterwards otherwise. By default every admitted call counts. Login
// anti-bruteforce counts failures only:
//
//	grpclimit.WithCountIf(func(c codes.Code) bool { return c == codes.Unauthenticated })
//
// It is [guard.WithCountIf] with the gRPC code as the status.
func WithCountIf(count func(code codes.Code) bool) guard.Option {
	if count == nil {
		return guard.WithCountIf(nil)
	}
	return guard.WithCountIf(func(status int) bool { return count(codes.Code(status)) })
}

// WithResetIf resets the call's key after the handler returned a code for
// which reset is true, for example clearing an account's failure count
// after a successful login; off by default. Codes are as for
// [WithCountIf]. It is [guard.WithResetIf] with the gRPC code as the
// status.
func WithResetIf(reset func(code codes.Code) bool) guard.Option {
	if reset == nil {
		return guard.WithResetIf(nil)
	}
	return guard.WithResetIf(func(status int) bool { return reset(codes.Code(status)) })
}

// WithMethods limits only the named methods; every other method passes
// through untouched, with no decision and no metadata. By default every
// method is limited. Names are full method names, "/package.Service/Method"
// (grpc.UnaryServerInfo.FullMethod); the option panics on a name of another
// shape, a programmer error caught at start-up. Several WithMethods
// options add up; WithMethods with no names changes nothing.
func WithMethods(fullMethods ...string) guard.Option {
	for _, m := range fullMethods {
		mustFullMethod("WithMethods", m)
	}
	return guard.Native(methods(append([]string(nil), fullMethods...)))
}

// WithHealthAndReflection with limit true limits the health service
// (grpc.health.v1.Health) and server reflection
// (grpc.reflection.v1.ServerReflection and v1alpha) as any other service.
// By default the server interceptors let their calls through untouched,
// with no decision and no metadata, unless [WithMethods] or a route of
// [NewRouter] names the method: load balancers and Kubernetes probe
// health every few seconds, and grpcurl asks reflection before each call,
// none of which should spend a client's budget or be refused. Both
// services are cheap to answer; limit them with this option where they are
// exposed to callers who could flood them.
func WithHealthAndReflection(limit bool) guard.Option {
	return guard.Native(healthAndReflection(limit))
}

// infrastructure reports whether fullMethod is a method of the health
// service or of server reflection, which the server interceptors skip by
// default.
func infrastructure(fullMethod string) bool {
	rest, ok := strings.CutPrefix(fullMethod, "/grpc.")
	if !ok {
		return false
	}
	return strings.HasPrefix(rest, "health.v1.Health/") ||
		strings.HasPrefix(rest, "reflection.v1.ServerReflection/") ||
		strings.HasPrefix(rest, "reflection.v1alpha.ServerReflection/")
}

// WithDenyHandler replaces the status of calls over the limit: deny is
// called for every verdict with v.Outcome [guard.OutcomeDeny], instead of
// the handler, and the call ends with the error it returns. A nil error
// keeps the default status (codes.ResourceExhausted with RetryInfo and
// QuotaFailure): a deny handler cannot let a call through (use
// guard.WithDryRun). The rate-limit metadata is already set when deny is
// called. Never put v.Err or v.Key in the answer. Bad keys and store
// failures keep their statuses (codes.InvalidArgument, codes.Unavailable).
// deny must be safe for concurrent use. None by default.
func WithDenyHandler(deny func(ctx context.Context, v *guard.Verdict) error) guard.Option {
	return guard.Native(denyHandler(deny))
}

// WithChallengeHandler replaces the status of challenged calls: those
// that would reach a rule's Challenge (core.Rule.Challenge) from a key
// that has not passed one (v.Outcome [guard.OutcomeChallenge]); they
// consumed nothing. challenge is called instead of the handler, and the
// call ends with the error it returns; a nil error keeps the default
// status (codes.Unauthenticated with an errdetails.ErrorInfo of reason
// [ChallengeReason]). The app verifies the client's answer to the
// challenge out of band (a CAPTCHA token, a second factor in metadata
// checked by an earlier interceptor) and calls core.Limiter.Pass for the
// key; the client's next call goes on. The rate-limit metadata is already
// set when challenge is called. Never put v.Err or v.Key in the answer.
// challenge must be safe for concurrent use. None by default.
func WithChallengeHandler(challenge func(ctx context.Context, v *guard.Verdict) error) guard.Option {
	return guard.Native(challengeHandler(challenge))
}

// mustFullMethod panics unless m looks like "/package.Service/Method".
func mustFullMethod(fn, m string) {
	svc, method, ok := strings.Cut(strings.TrimPrefix(m, "/"), "/")
	if !strings.HasPrefix(m, "/") || !ok || svc == "" || method == "" || strings.Contains(method, "/") {
		panic("ratekit: grpclimit: " + fn + ": " + strconv.Quote(m) + " is not a full method name (\"/package.Service/Method\")")
	}
}
