package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/core"
)

// TestServerAndClient runs the example's server on a loopback port and its
// client against it, and checks that each method is limited as announced.
func TestServerAndClient(t *testing.T) {
	srv, err := newServer(core.NewMemoryStore(), t.Logf)
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
