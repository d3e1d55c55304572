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
	srv, err := newServer(core.NewMemoryStore(), keyfunc.ClientIP(), t.Logf, serverLimits())
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
	if err := runClient(context.Background(), lis.Addr().String(), 4, &out, nil); err != nil {
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
	srv, err := newServer(core.NewMemoryStore(), keyfunc.ClientIP(), t.Logf, serverLimits())
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

// TestThrottledClient: with -throttle the client keeps under the server's
// limits through grpclimit's client interceptors: every call of every
// kind succeeds, those over a limit after waiting for their turn. The
// windows are shortened to 300 ms.
func TestThrottledClient(t *testing.T) {
	limits := serverLimits()
	for i := range limits {
		limits[i].policy.Rules[0].Window = 300 * time.Millisecond
	}
	srv, err := newServer(core.NewMemoryStore(), keyfunc.ClientIP(), t.Logf, limits)
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
	start := time.Now()
	if err := runClient(context.Background(), lis.Addr().String(), 5, &out, limits); err != nil {
		t.Fatalf("runClient = %v", err)
	}
	elapsed := time.Since(start)
	t.Logf("client output after %v:\n%s", elapsed, out.String())
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var name, code string
		var i int
		if _, err := fmt.Sscanf(line, "%s #%d: %s", &name, &i, &code); err != nil || code != "OK" {
			t.Errorf("client line %q: want every call OK", line)
		}
	}
	// 5 UnaryCalls at 3 per window and 5 streams at 2 per window wait
	// for at least one window each.
	if elapsed < 600*time.Millisecond {
		t.Errorf("the throttled calls took %v, want the waits of at least 2 windows (600ms)", elapsed)
	}
}
