package grpclimit

import (
	"context"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfunc"
)

// Option configures an interceptor or a [Router]. Options are applied in
// order; for options that set one value the last one wins.
type Option func(*config)

type config struct {
	guard   []core.GuardOption
	methods map[string]struct{} // nil: every method
	deny    func(ctx context.Context, v *core.Verdict) error
}

func newConfig(opts []Option) config {
	var c config
	for _, opt := range opts {
		opt(&c)
	}
	return c
}

// WithKey sets the key function; [keyfunc.ClientIP]() (the peer's IP, no
// trusted proxies) by default. A nil f keeps the default. See
// [core.WithKey].
func WithKey(f keyfunc.Func) Option { return forward(core.WithKey(f)) }

// WithSkip sets a predicate for calls that are not limited at all, such as
// internal callers; none by default. See [core.WithSkip].
func WithSkip(f func(keyfunc.Request) bool) Option { return forward(core.WithSkip(f)) }

// WithCost sets the units a call (or a stream, once, when it opens) costs;
// 1 by default. See [core.WithCost].
func WithCost(f func(keyfunc.Request) int64) Option { return forward(core.WithCost(f)) }

// WithAlso adds a limit decided together with this one: l keyed by key.
// The call is admitted only if every limit admits it, and a call denied by
// one consumes nothing from the others, even when their keys live in
// different Redis Cluster slots. A denial is answered with the denying
// limit's metadata and QuotaFailure. See [core.WithAlso]; it panics if l
// or key is nil, a programmer error caught at start-up.
func WithAlso(l *core.Limiter, key keyfunc.Func) Option { return forward(core.WithAlso(l, key)) }

// WithNoKey says what to do with calls that have no key;
// [core.NoKeySkip] by default. [core.NoKeyReject] answers
// codes.InvalidArgument.
func WithNoKey(a core.NoKeyAction) Option { return forward(core.WithNoKey(a)) }

// WithKeyError says what to do when the key function fails;
// [core.KeyErrorReject] (codes.InvalidArgument) by default.
func WithKeyError(a core.KeyErrorAction) Option { return forward(core.WithKeyError(a)) }

// WithDryRun makes the interceptor decide and report to the observers but
// never refuse a call for being over the limit (nor for a FailClosed store
// failure): such calls reach the handler without rate-limit metadata, and
// the observers see them with DryRun set. Bad keys are still answered
// codes.InvalidArgument. Use it to tune limits safely in production. Off
// by default. See [core.WithDryRun].
func WithDryRun(on bool) Option { return forward(core.WithDryRun(on)) }

// WithObserver adds an observer that sees every call the interceptor
// handles: decisions, skips, key errors and store failures. Several
// observers are called in order. See [core.WithGuardObserver].
func WithObserver(obs core.Observer) Option { return forward(core.WithGuardObserver(obs)) }

// WithHeaders selects the rate-limit response header metadata;
// [core.HeadersXRateLimit] by default. Names are sent in lowercase
// (x-ratelimit-limit, ratelimit-policy, …). See [core.WithHeaders].
func WithHeaders(s core.HeaderStyle) Option { return forward(core.WithHeaders(s)) }

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
// It forwards to [core.WithCountIf]; the status core sees is the numeric
// gRPC code, not an HTTP status.
func WithCountIf(count func(code codes.Code) bool) Option {
	if count == nil {
		return forward(core.WithCountIf(nil))
	}
	return forward(core.WithCountIf(func(status int) bool { return count(codes.Code(status)) }))
}

// WithResetIf resets the call's key after the handler returned a code for
// which reset is true, for example clearing an account's failure count
// after a successful login; off by default. Codes are as for
// [WithCountIf]. It forwards to [core.WithResetIf].
func WithResetIf(reset func(code codes.Code) bool) Option {
	if reset == nil {
		return forward(core.WithResetIf(nil))
	}
	return forward(core.WithResetIf(func(status int) bool { return reset(codes.Code(status)) }))
}

// WithMethods limits only the named methods; every other method passes
// through untouched, with no decision and no metadata. By default every
// method is limited. Names are full method names, "/package.Service/Method"
// (grpc.UnaryServerInfo.FullMethod); the option panics on a name of another
// shape, a programmer error caught at start-up. Several WithMethods
// options add up; WithMethods with no names changes nothing.
func WithMethods(fullMethods ...string) Option {
	for _, m := range fullMethods {
		mustFullMethod("WithMethods", m)
	}
	return func(c *config) {
		if len(fullMethods) == 0 {
			return
		}
		if c.methods == nil {
			c.methods = make(map[string]struct{}, len(fullMethods))
		}
		for _, m := range fullMethods {
			c.methods[m] = struct{}{}
		}
	}
}

// WithDenyHandler replaces the status of calls over the limit: deny is
// called for every verdict with v.Outcome [core.OutcomeDeny], instead of
// the handler, and the call ends with the error it returns. A nil error
// keeps the default status (codes.ResourceExhausted with RetryInfo and
// QuotaFailure): a deny handler cannot let a call through (use
// [WithDryRun]). The rate-limit metadata is already set when deny is
// called. Never put v.Err or v.Key in the answer. Bad keys and store
// failures keep their statuses (codes.InvalidArgument, codes.Unavailable).
// deny must be safe for concurrent use. None by default.
func WithDenyHandler(deny func(ctx context.Context, v *core.Verdict) error) Option {
	return func(c *config) { c.deny = deny }
}

func forward(o core.GuardOption) Option {
	return func(c *config) { c.guard = append(c.guard, o) }
}

// mustFullMethod panics unless m looks like "/package.Service/Method".
func mustFullMethod(fn, m string) {
	svc, method, ok := strings.Cut(strings.TrimPrefix(m, "/"), "/")
	if !strings.HasPrefix(m, "/") || !ok || svc == "" || method == "" || strings.Contains(method, "/") {
		panic("grpclimit: " + fn + ": " + strconv.Quote(m) + " is not a full method name (\"/package.Service/Method\")")
	}
}
