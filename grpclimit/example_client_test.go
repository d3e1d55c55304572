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
	"google.golang.org/grpc/status"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/grpclimit"
)

// Throttle the calls a client makes to a partner that allows so many per
// second: here 1 call per 100 ms to the connection's target, for every
// instance sharing the limiter's store. Calls over the limit wait for
// their turn instead of failing.
func ExampleUnaryClientInterceptor() {
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	partner, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{
		Name:  "partner",
		Rules: []core.Rule{{Limit: 1, Window: 100 * time.Millisecond}},
	})
	if err != nil {
		log.Fatal(err)
	}
	cc, err := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(grpclimit.UnaryClientInterceptor(partner)))
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()
	client := healthpb.NewHealthClient(cc)
	start := time.Now()
	for i := 1; i <= 3; i++ {
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
		fmt.Printf("call %d: %v\n", i, status.Code(err))
	}
	fmt.Println("waited at least 200 ms:", time.Since(start) >= 200*time.Millisecond)
	// Output:
	// call 1: OK
	// call 2: OK
	// call 3: OK
	// waited at least 200 ms: true
}

// Each stream is charged once, when it opens. A stream that would have to
// wait past its deadline fails to open at once.
func ExampleStreamClientInterceptor() {
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	partner, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{
		Name:  "partner-watch",
		Rules: []core.Rule{{Limit: 1, Window: time.Hour}},
	})
	if err != nil {
		log.Fatal(err)
	}
	cc, err := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainStreamInterceptor(grpclimit.StreamClientInterceptor(partner)))
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()
	client := healthpb.NewHealthClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 1; i <= 2; i++ {
		stream, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			st := status.Convert(err)
			fmt.Printf("stream %d: %v %q\n", i, st.Code(), st.Message())
			continue
		}
		resp, err := stream.Recv()
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("stream %d: %v\n", i, resp.GetStatus())
	}
	// Output:
	// stream 1: SERVING
	// stream 2: DeadlineExceeded "deadline exceeded while waiting for the rate limit"
}
