package grpclimit_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/grpc/status"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/grpclimit"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// infraServer serves the test service, the health service and server
// reflection (v1 and v1alpha) with opts on a loopback port.
func infraServer(t *testing.T, opts ...grpc.ServerOption) *grpc.ClientConn {
	t.Helper()
	srv := grpc.NewServer(opts...)
	testpb.RegisterTestServiceServer(srv, testService{})
	healthpb.RegisterHealthServer(srv, health.NewServer())
	reflection.Register(srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// infraCalls makes, in order, a health Check, a health Watch (until its
// first message), a v1 and a v1alpha reflection request listing the
// services, as grpcurl does before its call, then an EmptyCall; it returns
// each call's code and whether it got rate-limit metadata.
func infraCalls(t *testing.T, cc *grpc.ClientConn) (codes []codes.Code, limited []bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	add := func(md metadata.MD, err error) {
		codes = append(codes, status.Code(err))
		limited = append(limited, len(md.Get("x-ratelimit-limit")) > 0)
	}
	var md metadata.MD
	_, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&md))
	add(md, err)

	watch, err := healthpb.NewHealthClient(cc).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = watch.Recv()
		md, _ = watch.Header()
	}
	add(md, err)

	v1, err := reflectionv1.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
	if err == nil {
		err = v1.Send(&reflectionv1.ServerReflectionRequest{MessageRequest: &reflectionv1.ServerReflectionRequest_ListServices{}})
	}
	if err == nil {
		_, err = v1.Recv()
		md, _ = v1.Header()
	}
	add(md, err)

	v1alpha, err := reflectionv1alpha.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
	if err == nil {
		// grpcurl still asks v1alpha of servers without v1.
		err = v1alpha.Send(&reflectionv1alpha.ServerReflectionRequest{ //nolint:staticcheck // deprecated, still served and asked for
			MessageRequest: &reflectionv1alpha.ServerReflectionRequest_ListServices{}})
	}
	if err == nil {
		_, err = v1alpha.Recv()
		md, _ = v1alpha.Header()
	}
	add(md, err)

	md = nil
	_, err = testpb.NewTestServiceClient(cc).EmptyCall(ctx, &testpb.Empty{}, grpc.Header(&md))
	add(md, err)
	return codes, limited
}

// The health service and server reflection are not limited by default,
// whichever way the interceptors are built, so that probes and grpcurl
// spend nothing of a client's budget; WithHealthAndReflection(true), or
// naming a method, limits them as any other.
func TestHealthAndReflection(t *testing.T) {
	t.Parallel()
	both := func(u grpc.UnaryServerInterceptor, s grpc.StreamServerInterceptor) []grpc.ServerOption {
		return []grpc.ServerOption{grpc.ChainUnaryInterceptor(u), grpc.ChainStreamInterceptor(s)}
	}
	limiter := func(limit int64) *core.Limiter {
		return testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("infra", testkit.PerHour(limit)))
	}
	ok, exhausted := codes.OK, codes.ResourceExhausted
	for _, tc := range []struct {
		name    string
		opts    func() []grpc.ServerOption
		codes   []codes.Code
		limited []bool
	}{
		{"LimitByIP", func() []grpc.ServerOption {
			r := grpclimit.LimitByIP(1, time.Hour)
			return both(r.UnaryServerInterceptor(), r.StreamServerInterceptor())
		}, []codes.Code{ok, ok, ok, ok, ok}, []bool{false, false, false, false, true}},
		{"interceptors", func() []grpc.ServerOption {
			l := limiter(1)
			return both(grpclimit.UnaryServerInterceptor(l), grpclimit.StreamServerInterceptor(l))
		}, []codes.Code{ok, ok, ok, ok, ok}, []bool{false, false, false, false, true}},
		{"NewRouter", func() []grpc.ServerOption {
			r := grpclimit.NewRouter(limiter(1), nil)
			return both(r.UnaryServerInterceptor(), r.StreamServerInterceptor())
		}, []codes.Code{ok, ok, ok, ok, ok}, []bool{false, false, false, false, true}},
		{"WithHealthAndReflection", func() []grpc.ServerOption {
			r := grpclimit.LimitByIP(4, time.Hour, grpclimit.WithHealthAndReflection(true))
			return both(r.UnaryServerInterceptor(), r.StreamServerInterceptor())
		}, []codes.Code{ok, ok, ok, ok, exhausted}, []bool{true, true, true, true, true}},
		{"named by a route", func() []grpc.ServerOption {
			r := grpclimit.NewRouter(limiter(100), map[string]*core.Limiter{healthpb.Health_Check_FullMethodName: limiter(1)})
			return both(r.UnaryServerInterceptor(), r.StreamServerInterceptor())
		}, []codes.Code{ok, ok, ok, ok, ok}, []bool{true, false, false, false, true}},
		{"named by WithMethods", func() []grpc.ServerOption {
			l := limiter(1)
			m := grpclimit.WithMethods(healthpb.Health_Watch_FullMethodName, testpb.TestService_EmptyCall_FullMethodName)
			return both(grpclimit.UnaryServerInterceptor(l, m), grpclimit.StreamServerInterceptor(l, m))
		}, []codes.Code{ok, ok, ok, ok, exhausted}, []bool{false, true, false, false, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			gotCodes, gotLimited := infraCalls(t, infraServer(t, tc.opts()...))
			for i := range gotCodes {
				if gotCodes[i] != tc.codes[i] || gotLimited[i] != tc.limited[i] {
					t.Errorf("codes %v, rate-limit metadata %v; want %v, %v (Check, Watch, reflection v1, v1alpha, EmptyCall)",
						gotCodes, gotLimited, tc.codes, tc.limited)
					break
				}
			}
		})
	}
}
