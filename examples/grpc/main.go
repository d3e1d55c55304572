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
// The client can also keep under the server's limits itself, with
// ratekit's client interceptors (grpclimit.UnaryClientInterceptor and
// StreamClientInterceptor): each call over a limit then waits for its
// turn, about 10 s, instead of being refused:
//
//	go run ./examples/grpc -client -n 5 -throttle
//
// or call it with grpcurl, which finds the services through gRPC server
// reflection (install it with your package manager, brew install grpcurl,
// or go install github.com/fullstorydev/grpcurl/cmd/grpcurl@latest, which
// builds it in a minute or two):
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
	"github.com/ratekit/ratekit/examples/internal/exampleenv"
	"github.com/ratekit/ratekit/grpclimit"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/keyfunc"
)

func main() {
	client := flag.Bool("client", false, "call the server at -addr instead of serving")
	n := flag.Int("n", 5, "calls of each kind to make with -client")
	throttle := flag.Bool("throttle", false, "with -client: keep under the server's limits, each call waiting for its turn (client interceptors)")
	flags := exampleenv.Parse("127.0.0.1:50051", exampleenv.ByIP)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if *client {
		var own []limit
		if *throttle {
			own = serverLimits()
		}
		if err := runClient(ctx, flags.Addr, *n, os.Stdout, own); err != nil {
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
	srv, err := newServer(exampleenv.Store(), flags.ClientIP, log.Printf, serverLimits(), flags.Options()...)
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

// limit is one policy of the server and the method it limits.
type limit struct {
	method string // "" for every method that neither another limit nor unlimited names
	policy core.Policy
}

// serverLimits returns the server's limits, per client IP.
func serverLimits() []limit {
	return []limit{
		{testpb.TestService_UnaryCall_FullMethodName, core.Policy{Name: "grpc-unary", Rules: []core.Rule{{Limit: 3, Window: 10 * time.Second}}}},
		{testpb.TestService_StreamingOutputCall_FullMethodName, core.Policy{Name: "grpc-streams", Rules: []core.Rule{{Limit: 2, Window: 10 * time.Second}}}},
		{"", core.Policy{Name: "grpc-api", Rules: []core.Rule{{Limit: 10, Window: 10 * time.Second}}}},
	}
}

// unlimited are the methods never limited: health checks, and server
// reflection, which grpcurl calls before every call.
var unlimited = []string{
	healthpb.Health_Check_FullMethodName,
	healthpb.Health_List_FullMethodName,
	healthpb.Health_Watch_FullMethodName,
	reflectionv1.ServerReflection_ServerReflectionInfo_FullMethodName,
	reflectionv1alpha.ServerReflection_ServerReflectionInfo_FullMethodName,
}

// newServer returns a gRPC server with the health and test services and
// server reflection, limited per method and per client IP (as clientIP
// finds it) by limits. logf reports what is limited and every denial.
func newServer(store core.Store, clientIP keyfunc.Func, logf func(format string, args ...any), limits []limit, opts ...core.Option) (*grpc.Server, error) {
	var def *core.Limiter
	routes := map[string]*core.Limiter{}
	for _, m := range unlimited {
		routes[m] = nil
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
// With throttle, the server's limits, the client keeps under them itself
// (see throttled): a call over one waits for its turn.
func runClient(ctx context.Context, addr string, n int, out io.Writer, throttle []limit) error {
	dial := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	timeout := 5 * time.Second
	if throttle != nil {
		unary, stream, err := throttled(throttle)
		if err != nil {
			return err
		}
		dial = append(dial, grpc.WithChainUnaryInterceptor(unary...), grpc.WithChainStreamInterceptor(stream...))
		timeout = time.Minute // room to wait for a turn; a wait that cannot end in time fails at once
	}
	cc, err := grpc.NewClient(addr, dial...)
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
			cctx, cancel := context.WithTimeout(ctx, timeout)
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

// throttled returns client interceptors that keep a client's calls under
// limits, the server's: each method's calls wait until they fit its
// limit (grpclimit.UnaryClientInterceptor, StreamClientInterceptor), on
// this process's memory store, keyed by the server's address. Each
// window is 5% longer than the server's, with at least 50 ms more: the
// headroom that keeps a call that left in time from arriving a little
// early for the server's window.
func throttled(limits []limit) (unary []grpc.UnaryClientInterceptor, stream []grpc.StreamClientInterceptor, err error) {
	store := core.NewMemoryStore()
	named := map[string]bool{}
	for _, m := range unlimited {
		named[m] = true
	}
	for _, lm := range limits {
		named[lm.method] = true
	}
	for _, lm := range limits {
		p := lm.policy
		p.Rules = nil
		for _, r := range lm.policy.Rules {
			r.Window += max(r.Window/20, 50*time.Millisecond)
			p.Rules = append(p.Rules, r)
		}
		l, err := core.NewLimiter(store, p)
		if err != nil {
			return nil, nil, err
		}
		var scope guard.Option
		if lm.method != "" {
			scope = grpclimit.WithMethods(lm.method)
		} else {
			scope = guard.WithSkip(func(r keyfunc.Request) bool { return named[r.Route()] })
		}
		unary = append(unary, grpclimit.UnaryClientInterceptor(l, scope))
		stream = append(stream, grpclimit.StreamClientInterceptor(l, scope))
	}
	return unary, stream, nil
}
