package grpclimit

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/ratekit/ratekit/internal/peeraddr"
	"github.com/ratekit/ratekit/keyfunc"
)

// errNoBody is what Request.Body returns: the message has not been
// decoded when the interceptor runs, and there is no neutral body to read.
var errNoBody = fmt.Errorf("ratekit: grpclimit: no request body before the handler: %w", keyfunc.ErrNoKey)

// Request returns the [keyfunc.Request] view of a call with context ctx to
// fullMethod, as the interceptors give it to key, skip and cost functions.
// Use it to unit-test a key function, with a context built by
// metadata.NewIncomingContext and peer.NewContext.
//
// The view reads the call as follows:
//   - Method is "POST";
//   - Route and Path are fullMethod ("/package.Service/Method");
//   - Header and Values read the incoming metadata; names are matched in
//     lowercase, as gRPC stores them;
//   - Query is always "";
//   - RemoteAddr is the peer's address (peer.FromContext), "" if unknown;
//   - Value is ctx.Value;
//   - Body returns an error wrapping [keyfunc.ErrNoKey]: the request
//     message is not decoded before the handler, so a key function that
//     reads the body finds no key (by default the call is then not
//     limited; see [guard.WithNoKey]).
func Request(ctx context.Context, fullMethod string) keyfunc.Request {
	return &request{ctx: ctx, method: fullMethod}
}

// request is the keyfunc.Request view of a gRPC call, reading the context
// lazily. The interceptors take views from a pool.
type request struct {
	ctx    context.Context
	method string
}

func (r *request) Context() context.Context { return r.ctx }
func (r *request) Method() string           { return "POST" }
func (r *request) Route() string            { return r.method }
func (r *request) Path() string             { return r.method }
func (r *request) Query(string) string      { return "" }
func (r *request) Value(key any) any        { return r.ctx.Value(key) }

func (r *request) Header(name string) string {
	if v := r.Values(name); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (r *request) Values(name string) []string {
	// strings.ToLower returns name itself when it is already lowercase.
	return metadata.ValueFromIncomingContext(r.ctx, strings.ToLower(name))
}

func (r *request) RemoteAddr() string {
	if p, ok := peer.FromContext(r.ctx); ok && p.Addr != nil {
		return peeraddr.String(p.Addr)
	}
	return ""
}

func (r *request) Body(int64) ([]byte, error) { return nil, errNoBody }
