package grpclimit_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/grpclimit"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/keyfunc"
)

func ExampleUnaryServerInterceptor() {
	limiter, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{
		Name:  "api",
		Rules: []core.Rule{{Limit: 2, Window: time.Minute}},
	})
	if err != nil {
		log.Fatal(err)
	}
	// Keyed by the client IP by default.
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(limiter)))
	testpb.RegisterTestServiceServer(srv, testService{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()
	client := testpb.NewTestServiceClient(cc)
	for i := 1; i <= 3; i++ {
		_, err := client.EmptyCall(context.Background(), &testpb.Empty{})
		st := status.Convert(err)
		fmt.Printf("call %d: %v %q\n", i, st.Code(), st.Message())
	}
	// Output:
	// call 1: OK ""
	// call 2: OK ""
	// call 3: ResourceExhausted "rate limit exceeded"
}

func ExampleStreamServerInterceptor() {
	limiter, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{
		Name:  "streams",
		Rules: []core.Rule{{Limit: 1, Window: time.Minute}},
	})
	if err != nil {
		log.Fatal(err)
	}
	// Each stream is charged once, when it opens.
	srv := grpc.NewServer(grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(limiter)))
	testpb.RegisterTestServiceServer(srv, testService{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()
	client := testpb.NewTestServiceClient(cc)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := 1; i <= 2; i++ {
		stream, err := client.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{
			ResponseParameters: []*testpb.ResponseParameters{{}}, // one message
		})
		if err != nil {
			log.Fatal(err)
		}
		// A refused stream fails on its first Recv.
		if _, err := stream.Recv(); err != nil {
			fmt.Printf("stream %d: %v\n", i, status.Code(err))
			continue
		}
		fmt.Printf("stream %d: a message\n", i)
	}
	// Output:
	// stream 1: a message
	// stream 2: ResourceExhausted
}

func ExampleNewRouter() {
	store := core.NewMemoryStore()
	must := func(l *core.Limiter, err error) *core.Limiter {
		if err != nil {
			log.Fatal(err)
		}
		return l
	}
	api := must(core.NewLimiter(store, core.Policy{Name: "api", Rules: []core.Rule{{Limit: 100, Window: time.Minute}}}))
	login := must(core.NewLimiter(store, core.Policy{Name: "login", Rules: []core.Rule{{Limit: 5, Window: time.Minute}}}))

	// The health service and server reflection are not limited (unless
	// WithHealthAndReflection(true)); a nil route exempts any other method.
	r := grpclimit.NewRouter(api, map[string]*core.Limiter{
		"/auth.v1.Auth/Login":   login,
		"/auth.v1.Auth/Version": nil, // not limited
	}, guard.WithKey(keyfunc.ClientIP()))
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(r.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(r.StreamServerInterceptor()),
	)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	// Register the other services and serve.

	// What the interceptor answers, called as the server would call it.
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 50000}})
	ok := func(context.Context, any) (any, error) { return "ok", nil }
	for _, m := range []string{"/auth.v1.Auth/Login", "/auth.v1.Auth/Login", "/auth.v1.Auth/Login", "/auth.v1.Auth/Login",
		"/auth.v1.Auth/Login", "/auth.v1.Auth/Login", "/auth.v1.Auth/Version", healthpb.Health_Check_FullMethodName} {
		_, err := r.UnaryServerInterceptor()(ctx, nil, &grpc.UnaryServerInfo{FullMethod: m}, ok)
		fmt.Println(m, status.Code(err))
	}
	// Output:
	// /auth.v1.Auth/Login OK
	// /auth.v1.Auth/Login OK
	// /auth.v1.Auth/Login OK
	// /auth.v1.Auth/Login OK
	// /auth.v1.Auth/Login OK
	// /auth.v1.Auth/Login ResourceExhausted
	// /auth.v1.Auth/Version OK
	// /grpc.health.v1.Health/Check OK
}

func ExampleWithMethods() {
	limiter, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{
		Name:  "login",
		Rules: []core.Rule{{Limit: 10, Window: time.Minute}},
	})
	if err != nil {
		log.Fatal(err)
	}
	// Only Login is limited; every other method passes through.
	icpt := grpclimit.UnaryServerInterceptor(limiter,
		guard.WithKey(keyfunc.Header("x-user")),
		grpclimit.WithMethods("/auth.v1.Auth/Login"))
	_ = grpc.NewServer(grpc.ChainUnaryInterceptor(icpt))

	// What the interceptor answers, called as the server would call it.
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-user", "alice"))
	ok := func(context.Context, any) (any, error) { return "ok", nil }
	for range 11 {
		_, err := icpt(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/auth.v1.Auth/Login"}, ok)
		if err != nil {
			fmt.Println("login:", status.Code(err))
		}
	}
	_, err = icpt(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/auth.v1.Auth/Logout"}, ok)
	fmt.Println("logout:", status.Code(err))
	// Output:
	// login: ResourceExhausted
	// logout: OK
}

func ExampleWithHealthAndReflection() {
	limiter, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{
		Name:  "everything",
		Rules: []core.Rule{{Limit: 1, Window: time.Minute}},
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 50000}})
	ok := func(context.Context, any) (any, error) { return "ok", nil }
	check := &grpc.UnaryServerInfo{FullMethod: healthpb.Health_Check_FullMethodName}
	for _, limit := range []bool{false, true} {
		// What the interceptor answers, called as the server would call it.
		icpt := grpclimit.UnaryServerInterceptor(limiter, grpclimit.WithHealthAndReflection(limit))
		var codes []string
		for range 3 {
			_, err := icpt(ctx, nil, check, ok)
			codes = append(codes, status.Code(err).String())
		}
		fmt.Println("limit health:", limit, codes)
	}
	// Output:
	// limit health: false [OK OK OK]
	// limit health: true [OK ResourceExhausted ResourceExhausted]
}
