package grpclimit

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/keyfunc"
)

// Fixed status messages of the client interceptors; the error itself
// carries the detail for the calling app (errors.Is, err.Error()).
const (
	msgWaitInvalid  = "missing or malformed rate-limit key or cost"
	msgWaitNever    = "request cost can never fit the rate limit"
	msgWaitDeadline = "deadline exceeded while waiting for the rate limit"
	msgWaitCanceled = "call canceled while waiting for the rate limit"
)

// UnaryClientInterceptor returns an interceptor that throttles the unary
// calls a client makes with l: each call waits with
// [core.Limiter.WaitN] until it fits, then goes on unchanged. For a
// partner API that allows so many calls per second across the whole
// fleet, give every instance's connections a limiter on one
// redisstore.Store:
//
//	grpc.NewClient(target, grpc.WithChainUnaryInterceptor(grpclimit.UnaryClientInterceptor(partner)))
//
// The key is the connection's target (grpc.ClientConn.Target) by default:
// one limit per partner, shared by its methods; guard.WithKey replaces
// it. Key, skip and cost functions see the call as a [keyfunc.Request]
// whose Route and Path are the full method, whose Header and Values read
// the outgoing metadata, and whose RemoteAddr is ""; Body finds no key.
// [WithMethods] limits only the named methods. The guard options that
// apply are WithKey, WithBlock, WithSkip, WithCost, WithAlso, WithNoKey,
// WithKeyError, WithDryRun and WithObserver. With WithAlso every limit
// holds when the call goes on: no unit is kept while another limit is
// waited for (see [guard.Guard.Wait]).
//
// A call that cannot be admitted fails without reaching the server, with
// an error that wraps the cause and carries a gRPC status (status.Code):
// codes.DeadlineExceeded when the wait would end after the call's deadline
// (returned at once) or the deadline passed, codes.Canceled when the call
// was canceled, codes.ResourceExhausted when its cost can never fit,
// codes.PermissionDenied when the block predicate refuses it
// (guard.WithBlock; the error wraps guard.ErrBlocked), and
// codes.InvalidArgument for a malformed key source or cost. See
// [guard.Guard.Wait].
//
// The interceptor is safe for concurrent use. It panics if l is nil, on
// WithDenyHandler, which applies to servers, and on what outgoing calls
// cannot honour (guard.Guard.CheckOutbound: WithCountIf, WithResetIf, an
// InFlight policy), naming it: programmer errors caught at start-up.
func UnaryClientInterceptor(l *core.Limiter, opts ...guard.Option) grpc.UnaryClientInterceptor {
	c := newClient("UnaryClientInterceptor", l, opts)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		if err := c.wait(ctx, method, cc); err != nil {
			return err
		}
		return invoker(ctx, method, req, reply, cc, callOpts...)
	}
}

// StreamClientInterceptor returns an interceptor that throttles the
// streams a client opens with l, charging each stream once before it
// opens; the messages it carries are not counted. Keys, options and errors
// are as for [UnaryClientInterceptor]; a stream that cannot be admitted
// fails to open. The interceptor is safe for concurrent use. It panics as
// UnaryClientInterceptor does.
func StreamClientInterceptor(l *core.Limiter, opts ...guard.Option) grpc.StreamClientInterceptor {
	c := newClient("StreamClientInterceptor", l, opts)
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, callOpts ...grpc.CallOption) (grpc.ClientStream, error) {
		if err := c.wait(ctx, method, cc); err != nil {
			return nil, err
		}
		return streamer(ctx, desc, cc, method, callOpts...)
	}
}

// client is what the client interceptors share.
type client struct {
	g       *guard.Guard
	methods map[string]struct{} // nil: every method
}

func newClient(fn string, l *core.Limiter, opts []guard.Option) *client {
	if l == nil {
		panic("ratekit: grpclimit: " + fn + ": nil *core.Limiter")
	}
	g := guard.New(l, append([]guard.Option{guard.WithKey(targetKey)}, opts...)...)
	cfg := newConfig(fn, g)
	if cfg.deny != nil {
		panic("ratekit: grpclimit: " + fn + ": WithDenyHandler applies to server interceptors, not to outgoing calls")
	}
	if cfg.infra {
		panic("ratekit: grpclimit: " + fn + ": WithHealthAndReflection applies to server interceptors, not to outgoing calls")
	}
	if err := g.CheckOutbound(); err != nil {
		panic("ratekit: grpclimit: " + fn + ": " + strings.TrimPrefix(err.Error(), "ratekit: "))
	}
	return &client{g: g, methods: cfg.methods}
}

// wait waits until a call to method fits, and returns the error that ends
// the call when it cannot.
func (c *client) wait(ctx context.Context, method string, cc *grpc.ClientConn) error {
	if c.methods != nil {
		if _, ok := c.methods[method]; !ok {
			return nil
		}
	}
	r := &outgoing{ctx: ctx, method: method}
	if cc != nil {
		r.target = cc.Target()
	}
	v := c.g.Wait(ctx, r)
	if v.Proceed() {
		return nil
	}
	var st *status.Status
	switch {
	case v.Outcome == guard.OutcomeInvalid:
		st = status.New(codes.InvalidArgument, msgWaitInvalid)
	case v.Outcome == guard.OutcomeBlocked:
		st = status.New(codes.PermissionDenied, msgBlocked)
	case v.Outcome == guard.OutcomeDeny:
		st = status.New(codes.ResourceExhausted, msgWaitNever)
	case errors.Is(v.Err, context.Canceled):
		st = status.New(codes.Canceled, msgWaitCanceled)
	default:
		st = status.New(codes.DeadlineExceeded, msgWaitDeadline)
	}
	return &waitError{st: st, err: v.Err}
}

// waitError is the error of a call the client interceptors stopped: the
// cause, with a gRPC status of a fixed message.
type waitError struct {
	st  *status.Status
	err error
}

// Error says "ratekit:" once: the cause's message has it too.
func (e *waitError) Error() string {
	return "ratekit: grpclimit: " + strings.TrimPrefix(e.err.Error(), "ratekit: ")
}
func (e *waitError) Unwrap() error              { return e.err }
func (e *waitError) GRPCStatus() *status.Status { return e.st }

// outgoing is the keyfunc.Request view of an outgoing call.
type outgoing struct {
	ctx    context.Context
	method string
	target string
}

func (r *outgoing) Context() context.Context   { return r.ctx }
func (r *outgoing) Method() string             { return "POST" }
func (r *outgoing) Route() string              { return r.method }
func (r *outgoing) Path() string               { return r.method }
func (r *outgoing) Query(string) string        { return "" }
func (r *outgoing) RemoteAddr() string         { return "" }
func (r *outgoing) Value(key any) any          { return r.ctx.Value(key) }
func (r *outgoing) Body(int64) ([]byte, error) { return nil, errNoBody }

func (r *outgoing) Header(name string) string {
	if v := r.Values(name); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (r *outgoing) Values(name string) []string {
	md, _ := metadata.FromOutgoingContext(r.ctx)
	return md.Get(strings.ToLower(name))
}

// targetKey is the default key of the client interceptors: the target of
// the call's connection.
func targetKey(r keyfunc.Request) (string, error) {
	if o, ok := r.(*outgoing); ok && o.target != "" {
		return o.target, nil
	}
	return "", keyfunc.ErrNoKey
}
