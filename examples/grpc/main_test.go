package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfunc"
)

// TestServerAndClient runs the example's server on a loopback port and its
// client against it, and checks that each method is limited as announced.
func TestServerAndClient(t *testing.T) {
	srv, err := newServer(core.NewMemoryStore(), keyfunc.ClientIP(), t.Logf)
	if err != nil {
		t.Fatalf("newServer = %v", err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("net.Listen = %v", err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	var out strings.Builder
	if err := runClient(context.Background(), lis.Addr().String(), 4, &out); err != nil {
		t.Fatalf("runClient = %v", err)
	}
	t.Logf("client output:\n%s", out.String())
	want := map[string][]string{
		"UnaryCall":           {"OK", "OK", "OK", "ResourceExhausted"},
		"StreamingOutputCall": {"OK", "OK", "ResourceExhausted", "ResourceExhausted"},
		"EmptyCall":           {"OK", "OK", "OK", "OK"},
		"Health/Check":        {"OK", "OK", "OK", "OK"},
	}
	got := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var name, code string
		var i int
		if _, err := fmt.Sscanf(line, "%s #%d: %s", &name, &i, &code); err != nil {
			t.Fatalf("unexpected client line %q: %v", line, err)
		}
		got[name] = append(got[name], strings.TrimSuffix(code, ":"))
	}
	for name, codes := range want {
		if fmt.Sprint(got[name]) != fmt.Sprint(codes) {
			t.Errorf("%s codes = %v, want %v", name, got[name], codes)
		}
	}
	if !strings.Contains(out.String(), "rate limit exceeded, retry in") {
		t.Errorf("client output shows no RetryInfo:\n%s", out.String())
	}
}

// TestReflection: the server answers gRPC server reflection, as grpcurl
// uses it, and reflection is not limited: 15 listings within the default
// limit's 10 per 10 s all succeed.
func TestReflection(t *testing.T) {
	srv, err := newServer(core.NewMemoryStore(), keyfunc.ClientIP(), t.Logf)
	if err != nil {
		t.Fatalf("newServer = %v", err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("net.Listen = %v", err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	rc := reflectionv1.NewServerReflectionClient(cc)
	for i := range 15 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		stream, err := rc.ServerReflectionInfo(ctx)
		if err != nil {
			cancel()
			t.Fatalf("listing %d: %v", i+1, err)
		}
		err = stream.Send(&reflectionv1.ServerReflectionRequest{
			MessageRequest: &reflectionv1.ServerReflectionRequest_ListServices{},
		})
		var res *reflectionv1.ServerReflectionResponse
		if err == nil {
			res, err = stream.Recv()
		}
		cancel()
		if err != nil {
			t.Fatalf("listing %d: %v", i+1, err)
		}
		var names []string
		for _, s := range res.GetListServicesResponse().GetService() {
			names = append(names, s.GetName())
		}
		got := strings.Join(names, " ")
		for _, want := range []string{"grpc.testing.TestService", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
			if !strings.Contains(got, want) {
				t.Fatalf("listing %d: services %q lack %s", i+1, got, want)
			}
		}
	}
}
