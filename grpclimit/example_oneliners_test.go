package grpclimit_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/grpclimit"
	"github.com/ratekit/ratekit/redisstore"
)

// checkThrice serves the test service with opts on a loopback port and
// calls EmptyCall three times with the outgoing metadata kv, printing the
// codes.
func checkThrice(opts []grpc.ServerOption, kv ...string) {
	srv := grpc.NewServer(opts...)
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
	ctx := metadata.AppendToOutgoingContext(context.Background(), kv...)
	for i := 1; i <= 3; i++ {
		var md metadata.MD
		_, err := client.EmptyCall(ctx, &testpb.Empty{}, grpc.Header(&md))
		fmt.Printf("call %d: %v remaining=%v\n", i, status.Code(err), md.Get("x-ratelimit-remaining"))
	}
}

// One line per interceptor limits every method: 2 calls per minute per
// client IP, unary calls and streams together, counted in memory.
// grpclimit.UseStore(redisstore.New(rdb)) at start-up would count them in
// Redis, for every instance of the server together.
func ExampleLimitByIP() {
	lim := grpclimit.LimitByIP(2, time.Minute)
	checkThrice([]grpc.ServerOption{
		grpc.ChainUnaryInterceptor(lim.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(lim.StreamServerInterceptor()),
	})
	// Output:
	// call 1: OK remaining=[1]
	// call 2: OK remaining=[0]
	// call 3: ResourceExhausted remaining=[0]
}

// Each API key, sent as x-api-key metadata, gets 2 calls per minute.
func ExampleLimitByAppKey() {
	lim := grpclimit.LimitByAppKey(2, time.Minute)
	checkThrice([]grpc.ServerOption{grpc.ChainUnaryInterceptor(lim.UnaryServerInterceptor())}, "x-api-key", "k1")
	// Output:
	// call 1: OK remaining=[1]
	// call 2: OK remaining=[0]
	// call 3: ResourceExhausted remaining=[0]
}

// userCtxKey is where the example's authentication interceptor puts the
// user ID.
type userCtxKey struct{}

// Each user gets 2 calls per minute. The authentication interceptor comes
// first in the chain and puts the user in the call's context.
func ExampleLimitByUser() {
	authenticate := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		if u := metadata.ValueFromIncomingContext(ctx, "x-user"); len(u) > 0 { // a real app checks a token
			ctx = context.WithValue(ctx, userCtxKey{}, u[0])
		}
		return next(ctx, req)
	}
	lim := grpclimit.LimitByUser(userCtxKey{}, 2, time.Minute)
	checkThrice([]grpc.ServerOption{grpc.ChainUnaryInterceptor(authenticate, lim.UnaryServerInterceptor())}, "x-user", "ada")
	// Output:
	// call 1: OK remaining=[1]
	// call 2: OK remaining=[0]
	// call 3: ResourceExhausted remaining=[0]
}

// One line at start-up, before the middleware is built, moves every
// one-liner of the app to Redis, where every instance of the app counts
// together. (Not run: it needs a Redis.)
func ExampleUseStore() {
	rdb := redis.NewClient(&redis.Options{Addr: "redis.internal:6379"})
	grpclimit.UseStore(redisstore.New(rdb))

	lim := grpclimit.LimitByIP(100, time.Minute)
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(lim.UnaryServerInterceptor()), grpc.ChainStreamInterceptor(lim.StreamServerInterceptor()))
	lis, err := net.Listen("tcp", ":50051")
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(srv.Serve(lis))
}
