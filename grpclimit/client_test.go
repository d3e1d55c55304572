package grpclimit_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/grpclimit"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// partner is a stand-in for a partner's gRPC server: the test service on
// a loopback port, counting the calls and streams that reach it.
type partner struct {
	target string
	calls  atomic.Int64
}

func newPartner(t *testing.T) *partner {
	t.Helper()
	p := &partner{}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			p.calls.Add(1)
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			p.calls.Add(1)
			return h(srv, ss)
		}),
	)
	testpb.RegisterTestServiceServer(srv, testService{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	p.target = "passthrough:///" + lis.Addr().String()
	return p
}

// dial returns a client of p whose calls and streams are throttled by l.
func (p *partner) dial(t *testing.T, l *core.Limiter, opts ...guard.Option) testpb.TestServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(p.target,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(grpclimit.UnaryClientInterceptor(l, opts...)),
		grpc.WithChainStreamInterceptor(grpclimit.StreamClientInterceptor(l, opts...)),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return testpb.NewTestServiceClient(cc)
}

// TestClientMethods: WithMethods throttles only the named methods.
func TestClientMethods(t *testing.T) {
	p := newPartner(t)
	c := p.dial(t, testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "methods", Rules: []core.Rule{{Limit: 1, Window: time.Hour}}}), grpclimit.WithMethods(unaryCall))
	for range 3 {
		if _, err := c.EmptyCall(context.Background(), &testpb.Empty{}); err != nil {
			t.Fatalf("EmptyCall (not throttled) = %v", err)
		}
	}
	if _, err := c.UnaryCall(context.Background(), simpleRequest()); err != nil {
		t.Fatalf("first UnaryCall = %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.UnaryCall(ctx, simpleRequest()); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("second UnaryCall = %v, want DeadlineExceeded", err)
	}
}

// TestClientPanicsOnServerOptions: WithDenyHandler and
// WithHealthAndReflection, which apply to server interceptors, are refused
// when a client interceptor is built, by a panic naming them, as is what
// outgoing calls cannot honour (WithCountIf; the other cases are the
// outbound suite's); the panic says "ratekit:" once.
func TestClientPanicsOnServerOptions(t *testing.T) {
	l := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("panics", testkit.PerMinute(1)))
	for option, opt := range map[string]guard.Option{
		"WithDenyHandler":         grpclimit.WithDenyHandler(func(context.Context, *guard.Verdict) error { return nil }),
		"WithHealthAndReflection": grpclimit.WithHealthAndReflection(true),
		"WithCountIf":             guard.WithCountIf(func(int) bool { return true }),
	} {
		for name, build := range map[string]func(){
			"UnaryClientInterceptor":  func() { grpclimit.UnaryClientInterceptor(l, opt) },
			"StreamClientInterceptor": func() { grpclimit.StreamClientInterceptor(l, opt) },
		} {
			t.Run(option+"/"+name, func(t *testing.T) {
				defer func() {
					p := recover()
					if msg := fmt.Sprint(p); p == nil || !strings.Contains(msg, option) || !strings.Contains(msg, name) ||
						strings.Count(msg, "ratekit: ") != 1 {
						t.Errorf("%s with %s: panic %v, want one naming both, saying ratekit once", name, option, p)
					}
				}()
				build()
			})
		}
	}
}
