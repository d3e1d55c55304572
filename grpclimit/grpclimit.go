package grpclimit

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/keyfunc"
)

// Fixed status messages: no error detail ever reaches the client.
const (
	msgDenied      = "rate limit exceeded"
	msgBadKey      = "missing or malformed rate-limit key"
	msgUnavailable = "rate limiter unavailable"
	msgCanceled    = "call canceled before the rate limit decision"
	msgDeadline    = "deadline exceeded before the rate limit decision"
	msgBlocked     = "blocked"
	msgChallenge   = "challenge required"
)

// ChallengeReason is the Reason of the errdetails.ErrorInfo of a
// challenged call (guard.OutcomeChallenge), in the Domain "ratekit": its
// Metadata "policy" names the challenged policy (never the key).
const ChallengeReason = "CHALLENGE_REQUIRED"

// UnaryServerInterceptor returns an interceptor that limits unary calls
// with l. Calls over the limit end with codes.ResourceExhausted before the
// handler runs; see the package documentation for every answer. The
// interceptor is safe for concurrent use. It panics if l is nil or
// guard.WithStore or guard.WithName is given (they configure the limiter
// of the LimitBy functions): programmer errors caught at start-up.
func UnaryServerInterceptor(l *core.Limiter, opts ...guard.Option) grpc.UnaryServerInterceptor {
	return newSingle("UnaryServerInterceptor", l, opts).unary
}

// StreamServerInterceptor returns an interceptor that limits streams with
// l, charging each stream once when it opens. Streams over the limit end
// with codes.ResourceExhausted before the handler runs; the client sees it
// on its first Recv. The interceptor is safe for concurrent use. It panics
// if l is nil or guard.WithStore or guard.WithName is given: programmer
// errors caught at start-up.
func StreamServerInterceptor(l *core.Limiter, opts ...guard.Option) grpc.StreamServerInterceptor {
	return newSingle("StreamServerInterceptor", l, opts).stream
}

// Router limits the calls of a server with a unary and a stream
// interceptor that share their limits: each method with its own limiter
// and a default for the rest ([NewRouter]), or every method with one
// ([LimitByIP], [LimitByAppKey], [LimitByUser]). Build it once at
// start-up; a Router is safe for concurrent use.
type Router struct {
	e *engine
}

// UseStore sets the store of the one-liners built after it ([LimitByIP],
// [LimitByAppKey], [LimitByUser], and those of every other adapter) for
// the whole process: one line at start-up, before the routers are
// built, moves them all to Redis, where every instance counts together:
//
//	grpclimit.UseStore(redisstore.New(rdb))
//
// It is guard.UseStore, here so that this package's import suffices; it
// panics, as that does, on a nil store, on a second call, and after
// one-liners were built without guard.WithStore: programmer errors caught
// at start-up.
func UseStore(s core.Store) { guard.UseStore(s) }

// LimitByIP returns a router that admits limit calls per window of length
// per for each client IP, unary calls and streams alike (a stream counts
// once, when it opens), in this process's memory unless
// [UseStore] or guard.WithStore gives a store (Redis: every instance
// counts together). Each is a limit of its own, even beside another of
// the same rate (see guard.WithName):
//
//	lim := grpclimit.LimitByIP(100, time.Minute)
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(lim.UnaryServerInterceptor()),
//		grpc.ChainStreamInterceptor(lim.StreamServerInterceptor()))
//
// The key is the peer's IP address: behind a proxy, pass
// guard.WithKey(keyfunc.ClientIP(keyfunc.TrustedProxies(...))); over a
// Unix socket or bufconn there is none (see Keys in the package
// documentation). It takes the guard options and this package's own, as
// [UnaryServerInterceptor] does, and panics, naming the field, on an
// invalid limit, window, store or name; see [guard.LimitByIP].
func LimitByIP(limit int64, per time.Duration, opts ...guard.Option) *Router {
	return routerOf("LimitByIP", guard.LimitByIP(limit, per, opts...))
}

// LimitByAppKey returns a router that admits limit calls per window of
// length per for each API key, read from the x-api-key metadata; calls
// without one are not limited by it. It is configured and panics as
// [LimitByIP]; see [guard.LimitByAppKey].
func LimitByAppKey(limit int64, per time.Duration, opts ...guard.Option) *Router {
	return routerOf("LimitByAppKey", guard.LimitByAppKey(limit, per, opts...))
}

// LimitByUser returns a router that admits limit calls per window of
// length per for each user: the ID an authentication interceptor put in
// the call's context under the key user (context.WithValue). Chain its
// interceptors after that one. Calls without a user are not limited by
// it. It is configured and panics as [LimitByIP]; see
// [guard.LimitByUser].
func LimitByUser(user any, limit int64, per time.Duration, opts ...guard.Option) *Router {
	return routerOf("LimitByUser", guard.LimitByUser(user, limit, per, opts...))
}

// routerOf returns a router that limits every method with g; fn names
// the constructor in panics.
func routerOf(fn string, g *guard.Guard) *Router {
	return &Router{e: &engine{cfg: newConfig(fn, g), def: limitedOf(g)}}
}

// NewRouter returns a router that limits the methods in routes (full
// method names, "/package.Service/Method") with their limiters and every
// other method with def. A nil def leaves the other methods unlimited; a
// nil limiter in routes exempts that method from def. The options apply
// to every limiter; with [WithMethods], methods not named pass through
// whatever the routes say. Limiters shared by several methods count the
// methods' calls together, under one guard.
//
// NewRouter panics if a route is not a full method name, or if def is nil
// and no route has a limiter: programmer errors caught at start-up.
func NewRouter(def *core.Limiter, routes map[string]*core.Limiter, opts ...guard.Option) *Router {
	guards := make(map[*core.Limiter]*limited)
	get := func(l *core.Limiter) *limited {
		if l == nil {
			return nil
		}
		g, ok := guards[l]
		if !ok {
			g = newLimited(l, opts)
			guards[l] = g
		}
		return g
	}
	e := &engine{def: get(def), routes: make(map[string]*limited, len(routes))}
	for m, l := range routes {
		mustFullMethod("NewRouter", m)
		e.routes[m] = get(l)
	}
	if len(guards) == 0 {
		panic("ratekit: grpclimit: NewRouter: no limiter (def is nil and every route is nil)")
	}
	for _, g := range guards {
		e.cfg = newConfig("NewRouter", g.g)
		break
	}
	return &Router{e: e}
}

// UnaryServerInterceptor returns the router's unary server interceptor.
// It is safe for concurrent use.
func (r *Router) UnaryServerInterceptor() grpc.UnaryServerInterceptor { return r.e.unary }

// StreamServerInterceptor returns the router's stream server interceptor,
// which charges each stream once when it opens. It is safe for concurrent
// use.
func (r *Router) StreamServerInterceptor() grpc.StreamServerInterceptor { return r.e.stream }

// engine picks the guard of a method and answers the gRPC way.
type engine struct {
	cfg    config
	def    *limited
	routes map[string]*limited // nil for a single-limiter interceptor
}

func newSingle(fn string, l *core.Limiter, opts []guard.Option) *engine {
	if l == nil {
		panic("ratekit: grpclimit: " + fn + ": nil *core.Limiter")
	}
	g := newLimited(l, opts)
	return &engine{cfg: newConfig(fn, g.g), def: g}
}

// pick returns the guard for a method, nil when it is not limited: a
// method WithMethods does not name, one routed to nil, and, unless named
// or WithHealthAndReflection(true), one of the health service or of
// server reflection.
func (e *engine) pick(method string) *limited {
	named := false
	if e.cfg.methods != nil {
		if _, named = e.cfg.methods[method]; !named {
			return nil
		}
	}
	if g, ok := e.routes[method]; ok {
		return g
	}
	if !named && !bool(e.cfg.infra) && infrastructure(method) {
		return nil
	}
	return e.def
}

func (e *engine) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	g := e.pick(info.FullMethod)
	if g == nil {
		return handler(ctx, req)
	}
	v := g.admit(ctx, info.FullMethod)
	if md := headerMD(&v); md != nil {
		// An earlier interceptor may have sent the headers already: the
		// fields then go in the trailers. Both fail only outside a gRPC
		// server; the answer stands either way.
		if err := grpc.SetHeader(ctx, md); err != nil {
			_ = grpc.SetTrailer(ctx, md)
		}
	}
	if !v.Proceed() {
		return nil, e.refuse(ctx, g, v)
	}
	if !g.finish {
		return handler(ctx, req)
	}
	return g.unaryAndFinish(ctx, req, handler, &v)
}

// unaryAndFinish runs the handler and finishes v with the code it ended
// with. A panicking handler is finished as codes.Internal and the panic
// goes on, unrecovered, to a recovery interceptor.
func (g *limited) unaryAndFinish(ctx context.Context, req any, handler grpc.UnaryHandler, v *guard.Verdict) (any, error) {
	done := false
	defer func() {
		if !done {
			v.Finish(ctx, int(codes.Internal))
		}
	}()
	resp, err := handler(ctx, req)
	done = true
	g.done(ctx, v, err)
	return resp, err
}

func (e *engine) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	g := e.pick(info.FullMethod)
	if g == nil {
		return handler(srv, ss)
	}
	ctx := ss.Context()
	v := g.admit(ctx, info.FullMethod)
	if md := headerMD(&v); md != nil {
		if err := ss.SetHeader(md); err != nil {
			ss.SetTrailer(md) // the headers were sent already
		}
	}
	if !v.Proceed() {
		return e.refuse(ctx, g, v)
	}
	if !g.finish {
		return handler(srv, ss)
	}
	return g.streamAndFinish(ctx, srv, ss, handler, &v)
}

// streamAndFinish runs the handler and finishes v with the code the stream
// ended with. A panicking handler is finished as codes.Internal and the
// panic goes on, unrecovered, to a recovery interceptor.
func (g *limited) streamAndFinish(ctx context.Context, srv any, ss grpc.ServerStream, handler grpc.StreamHandler, v *guard.Verdict) error {
	done := false
	defer func() {
		if !done {
			v.Finish(ctx, int(codes.Internal))
		}
	}()
	err := handler(srv, ss)
	done = true
	g.done(ctx, v, err)
	return err
}

// refuse returns the error that ends a call the guard stopped. It takes
// the verdict by value so that the allowed path keeps it on the stack.
func (e *engine) refuse(ctx context.Context, g *limited, v guard.Verdict) error {
	var h func(ctx context.Context, v *guard.Verdict) error
	switch {
	case e.cfg.deny != nil && v.Outcome == guard.OutcomeDeny:
		h = e.cfg.deny
	case e.cfg.challenge != nil && v.Outcome == guard.OutcomeChallenge:
		h = e.cfg.challenge
	}
	if h != nil {
		if err := h(ctx, &v); err != nil {
			return err
		}
	}
	return g.status(&v).Err()
}

// limited is one guard with what its answers need, computed once.
type limited struct {
	g      *guard.Guard
	finish bool    // g.NeedsFinish()
	policy string  // QuotaFailure subject
	quotas []quota // the QuotaFailure of each rule of the policy alone
}

// quota is the QuotaFailure of a denial by one rule of a guard's own
// policy, built once: every denial of a flood answers with the same.
// WithDetails only reads it (marshals it into an Any of the status it
// returns), so the calls share it.
type quota struct {
	limit  int64
	window time.Duration // 0 for an InFlight policy
	qf     *errdetails.QuotaFailure
}

func newLimited(l *core.Limiter, opts []guard.Option) *limited {
	return limitedOf(guard.New(l, opts...))
}

func limitedOf(g *guard.Guard) *limited {
	p := g.Limiter().Policy()
	lg := &limited{g: g, finish: g.NeedsFinish(), policy: p.Name}
	if p.InFlight > 0 {
		lg.quotas = append(lg.quotas, newQuota(p.Name, p.InFlight, 0))
	}
	for _, r := range p.Rules {
		lg.quotas = append(lg.quotas, newQuota(p.Name, r.Limit, r.Window))
	}
	return lg
}

// newQuota builds the QuotaFailure of a denial by the rule of policy that
// admits limit units per window.
func newQuota(policy string, limit int64, window time.Duration) quota {
	return quota{limit: limit, window: window, qf: &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{
		{Subject: policy, Description: describe(limit, window)},
	}}}
}

// done completes an admitted call with the code the handler ended with.
// The refund or reset runs even if the client has gone away: it is
// bounded by the limiter's store timeout, not by the call's context.
// admit runs the guard for a call of method, through a pooled view.
// The verdict is decided into the result (hundreds of bytes), not into a
// variable copied there.
func (g *limited) admit(ctx context.Context, method string) (v guard.Verdict) {
	r := requests.Get().(*request)
	r.ctx, r.method = ctx, method
	v = g.g.Admit(ctx, r)
	*r = request{}
	requests.Put(r)
	return v
}

var requests = sync.Pool{New: func() any { return new(request) }}

func (g *limited) done(ctx context.Context, v *guard.Verdict, err error) {
	v.Finish(ctx, int(code(err)))
}

// status returns the default status for a verdict that does not proceed.
func (g *limited) status(v *guard.Verdict) *status.Status {
	switch v.Outcome {
	case guard.OutcomeDeny:
		if v.Decision.RetryAfter <= 0 {
			// A cost that can never fit: retrying does not help.
			return withDetails(status.New(codes.ResourceExhausted, msgDenied), g.quotaFailure(v))
		}
		return withDetails(status.New(codes.ResourceExhausted, msgDenied),
			retryInfo(v.Decision.RetryAfter), g.quotaFailure(v))
	case guard.OutcomeInvalid:
		// keyfunc.Reason is a fixed text, never request input.
		if r := keyfunc.Reason(v.Err); r != "" {
			return status.New(codes.InvalidArgument, r)
		}
		return status.New(codes.InvalidArgument, msgBadKey)
	case guard.OutcomeUnavailable:
		switch {
		case errors.Is(v.Err, context.DeadlineExceeded):
			return status.New(codes.DeadlineExceeded, msgDeadline)
		case errors.Is(v.Err, context.Canceled):
			return status.New(codes.Canceled, msgCanceled)
		}
		st := status.New(codes.Unavailable, msgUnavailable)
		if v.Decision.Source == core.SourceClosed && v.Decision.RetryAfter > 0 {
			st = withDetails(st, retryInfo(v.Decision.RetryAfter))
		}
		return st
	case guard.OutcomeBlocked:
		return status.New(codes.PermissionDenied, msgBlocked)
	case guard.OutcomeChallenge:
		return withDetails(status.New(codes.Unauthenticated, msgChallenge), &errdetails.ErrorInfo{
			Reason: ChallengeReason, Domain: "ratekit", Metadata: map[string]string{"policy": v.ItemName()},
		})
	}
	return status.New(codes.OK, "")
}

func retryInfo(d time.Duration) *errdetails.RetryInfo {
	return &errdetails.RetryInfo{RetryDelay: durationpb.New(d)}
}

// quotaFailure names the denying policy (the guard's own, or a limit added
// with WithAlso) and every violated rule, as the decision saw it (a tier's
// rules under core.WithTiers); never the key.
func (g *limited) quotaFailure(v *guard.Verdict) *errdetails.QuotaFailure {
	policy, own := g.policy, true
	if l := v.Limiter(); l != nil && l != g.g.Limiter() {
		policy, own = l.Policy().Name, false
	}
	d := &v.Decision
	if own {
		if qf := g.builtQuota(d); qf != nil {
			return qf
		}
	}
	q := &errdetails.QuotaFailure{}
	for _, s := range d.Rules() {
		if s.RetryAfter > 0 {
			q.Violations = append(q.Violations, &errdetails.QuotaFailure_Violation{Subject: policy, Description: describe(s.Limit, s.Window)})
		}
	}
	if len(q.Violations) == 0 {
		// A deny-cache answer knows only its binding rule.
		q.Violations = append(q.Violations, &errdetails.QuotaFailure_Violation{Subject: policy, Description: describe(d.Limit, d.Window)})
	}
	return q
}

// builtQuota returns the QuotaFailure built once for a denial by one
// rule of the guard's own policy, as quotaFailure would build it: the one
// violated rule, or the binding one when the decision names none (a
// deny-cache answer); nil when several rules were violated or the rule is
// not one of the policy's as constructed (a tier's).
func (g *limited) builtQuota(d *core.Decision) *errdetails.QuotaFailure {
	limit, window, n := d.Limit, d.Window, 0
	for _, s := range d.Rules() {
		if s.RetryAfter > 0 {
			limit, window = s.Limit, s.Window
			n++
		}
	}
	if n > 1 {
		return nil
	}
	for i := range g.quotas {
		if q := &g.quotas[i]; q.limit == limit && q.window == window {
			return q.qf
		}
	}
	return nil
}

// describe says what a rule allows, for QuotaFailure descriptions; an
// InFlight policy has no window.
func describe(limit int64, window time.Duration) string {
	if window == 0 {
		return "limit " + strconv.FormatInt(limit, 10) + " in flight"
	}
	return "limit " + strconv.FormatInt(limit, 10) + " per " + window.String()
}

// withDetails adds details to st, keeping st as it is if they cannot be
// marshalled (which does not happen for these well-known messages).
func withDetails(st *status.Status, details ...protoadapt.MessageV1) *status.Status {
	if ds, err := st.WithDetails(details...); err == nil {
		return ds
	}
	return st
}

// code returns the status code a handler's error ends the call with, as
// grpc-go's server computes it.
func code(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	if s, ok := status.FromError(err); ok {
		return s.Code()
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	}
	return codes.Unknown
}

// headerMD returns the verdict's rate-limit fields as response header
// metadata, nil when there are none.
func headerMD(v *guard.Verdict) metadata.MD { return v.Metadata() }
