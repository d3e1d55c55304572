// Command grpc runs a gRPC server whose methods are limited differently by
// ratekit's grpclimit, and a client that shows the answers.
//
// Start the server (memory store; set REDIS_URL, e.g.
// redis://127.0.0.1:6379/0, to share the limits through Redis):
//
//	go run ./examples/grpc
//
// Then, from another terminal, make a few calls of each kind:
//
//	go run ./examples/grpc -client -n 5
//
// or call it with grpcurl, which finds the services through gRPC server
// reflection:
//
//	grpcurl -plaintext 127.0.0.1:50051 list
//	for i in 1 2 3 4; do grpcurl -plaintext -d '{}' 127.0.0.1:50051 grpc.testing.TestService/UnaryCall; done   # the 4th: ResourceExhausted
//
// The server offers grpc's health service and its interop TestService:
//
//	/grpc.testing.TestService/UnaryCall            3 calls per 10 s per client IP
//	/grpc.testing.TestService/StreamingOutputCall  2 streams per 10 s per client IP
//	other TestService methods (EmptyCall, …)       10 calls per 10 s per client IP
//	/grpc.health.v1.Health/*, server reflection    not limited
//
// Calls over a limit end with codes.ResourceExhausted and a RetryInfo
// detail saying when to try again. Flags: -addr (127.0.0.1:50051, also the
// address -client calls), -trusted-proxy CIDR[,CIDR] (the client address
// is then read from the x-forwarded-for metadata those proxies send) and
// -failure-policy local|open|closed, as in every example.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
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
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/exampleenv"
	"github.com/ratekit/ratekit/keyfunc"
)

func main() {
	client := flag.Bool("client", false, "call the server at -addr instead of serving")
	n := flag.Int("n", 5, "calls of each kind to make with -client")
	flags := exampleenv.Parse("127.0.0.1:50051", exampleenv.ByIP)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if *client {
		if err := runClient(ctx, flags.Addr, *n, os.Stdout); err != nil {
			log.Fatal(err)
		}
		return
	}
	if err := runServer(ctx, flags); err != nil {
		log.Fatal(err)
	}
}

// runServer serves on flags.Addr until ctx is done.
func runServer(ctx context.Context, flags exampleenv.Flags) error {
	srv, err := newServer(exampleenv.Store(), flags.ClientIP, log.Printf, flags.Options()...)
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", flags.Addr)
	if err != nil {
		return err
	}
	log.Printf("serving gRPC on %s; try: go run ./examples/grpc -client -addr %s", lis.Addr(), lis.Addr())
	go func() {
		<-ctx.Done()
		srv.GracefulStop()
	}()
	return srv.Serve(lis)
}

// newServer returns a gRPC server with the health and test services and
// server reflection, limited per method and per client IP as clientIP
// finds it. logf reports what is limited and every denial.
func newServer(store core.Store, clientIP keyfunc.Func, logf func(format string, args ...any), opts ...core.Option) (*grpc.Server, error) {
	type limit struct {
		method string // "" for the default
		policy core.Policy
	}
	limits := []limit{
		{testpb.TestService_UnaryCall_FullMethodName, core.Policy{Name: "unary", Rules: []core.Rule{{Limit: 3, Window: 10 * time.Second}}}},
		{testpb.TestService_StreamingOutputCall_FullMethodName, core.Policy{Name: "streams", Rules: []core.Rule{{Limit: 2, Window: 10 * time.Second}}}},
		{"", core.Policy{Name: "api", Rules: []core.Rule{{Limit: 10, Window: 10 * time.Second}}}},
	}
	var def *core.Limiter
	routes := map[string]*core.Limiter{
		healthpb.Health_Check_FullMethodName: nil, // never limit health checks
		healthpb.Health_List_FullMethodName:  nil,
		healthpb.Health_Watch_FullMethodName: nil,
		// Nor server reflection, which grpcurl calls before every call.
		reflectionv1.ServerReflection_ServerReflectionInfo_FullMethodName:      nil,
		reflectionv1alpha.ServerReflection_ServerReflectionInfo_FullMethodName: nil,
	}
	for _, lm := range limits {
		l, err := core.NewLimiter(store, lm.policy, opts...)
		if err != nil {
			return nil, err
		}
		r := lm.policy.Rules[0]
		if lm.method == "" {
			def = l
			logf("limit: every other method: %d per %v per client IP (policy %q)", r.Limit, r.Window, lm.policy.Name)
			continue
		}
		routes[lm.method] = l
		logf("limit: %s: %d per %v per client IP (policy %q)", lm.method, r.Limit, r.Window, lm.policy.Name)
	}
	logf("limit: /grpc.health.v1.Health/* and server reflection: not limited")

	logDenials := core.ObserverFunc(func(_ context.Context, e core.Event) {
		if e.Kind == core.EventDecision && !e.Decision.Allowed {
			logf("denied: policy %q key %s, retry in %v", e.Policy, e.Key, e.Decision.RetryAfter.Round(time.Millisecond))
		}
	})
	router := grpclimit.NewRouter(def, routes,
		// The peer's IP; behind a proxy, the forwarded client's
		// (-trusted-proxy).
		guard.WithKey(clientIP),
		guard.WithObserver(logDenials),
	)
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(router.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(router.StreamServerInterceptor()),
	)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	testpb.RegisterTestServiceServer(srv, testService{})
	reflection.Register(srv) // so that grpcurl can list and call the services
	return srv, nil
}

// testService implements the calls the client makes.
type testService struct {
	testpb.UnimplementedTestServiceServer
}

func (testService) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	return &testpb.Empty{}, nil
}

func (testService) UnaryCall(_ context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{Payload: req.GetPayload()}, nil
}

func (testService) StreamingOutputCall(req *testpb.StreamingOutputCallRequest, stream grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	for range req.GetResponseParameters() {
		if err := stream.Send(&testpb.StreamingOutputCallResponse{}); err != nil {
			return err
		}
	}
	return nil
}

// runClient makes n calls of each kind to addr and prints how each ended.
func runClient(ctx context.Context, addr string, n int, out io.Writer) error {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	tc := testpb.NewTestServiceClient(cc)
	hc := healthpb.NewHealthClient(cc)

	calls := []struct {
		name string
		call func(ctx context.Context, hdr *metadata.MD) error
	}{
		{"UnaryCall", func(ctx context.Context, hdr *metadata.MD) error {
			_, err := tc.UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.Header(hdr))
			return err
		}},
		{"StreamingOutputCall", func(ctx context.Context, hdr *metadata.MD) error {
			stream, err := tc.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{
				ResponseParameters: []*testpb.ResponseParameters{{}, {}},
			})
			if err != nil {
				return err
			}
			for {
				if _, err = stream.Recv(); err != nil {
					break
				}
			}
			*hdr, _ = stream.Header()
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}},
		{"EmptyCall", func(ctx context.Context, hdr *metadata.MD) error {
			_, err := tc.EmptyCall(ctx, &testpb.Empty{}, grpc.Header(hdr))
			return err
		}},
		{"Health/Check", func(ctx context.Context, hdr *metadata.MD) error {
			_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(hdr))
			return err
		}},
	}
	for _, c := range calls {
		for i := 1; i <= n; i++ {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			var hdr metadata.MD
			err := c.call(cctx, &hdr)
			cancel()
			st := status.Convert(err)
			line := fmt.Sprintf("%-20s #%d: %v", c.name, i, st.Code())
			if rem := hdr.Get("x-ratelimit-remaining"); len(rem) > 0 {
				line += fmt.Sprintf(" (remaining %s)", rem[0])
			}
			switch st.Code() {
			case codes.OK:
			case codes.ResourceExhausted:
				line += ": " + st.Message()
				for _, d := range st.Details() {
					if ri, ok := d.(*errdetails.RetryInfo); ok {
						line += fmt.Sprintf(", retry in %v", ri.GetRetryDelay().AsDuration().Round(time.Millisecond))
					}
				}
			default:
				line += ": " + st.Message()
			}
			fmt.Fprintln(out, line)
		}
	}
	return nil
}
