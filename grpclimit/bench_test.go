package grpclimit_test

import (
	"context"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/grpclimit"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/keyfunc"
)

// benchStream stands in for the server transport stream, so that
// grpc.SetHeader works as it does in a server.
type benchStream struct{}

func (benchStream) Method() string               { return emptyCall }
func (benchStream) SetHeader(metadata.MD) error  { return nil }
func (benchStream) SendHeader(metadata.MD) error { return nil }
func (benchStream) SetTrailer(metadata.MD) error { return nil }

// BenchmarkUnaryInterceptor measures the interceptor around a trivial
// handler on the allowed path with a memory store, against the bare
// handler call. Keys rotate over a pool so that no key's sliding log grows
// past a realistic size.
func BenchmarkUnaryInterceptor(b *testing.B) {
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-user", "u", "user-agent", "bench"))
	ctx = peer.NewContext(ctx, &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 50000}})
	ctx = grpc.NewContextWithServerTransportStream(ctx, benchStream{})
	info := &grpc.UnaryServerInfo{FullMethod: emptyCall}
	req := &testpb.Empty{}
	handler := func(_ context.Context, req any) (any, error) { return req, nil }

	const pool = 1 << 16
	keys := make([]string, pool)
	for i := range keys {
		keys[i] = "user-" + strconv.Itoa(i)
	}
	var n atomic.Uint64
	rotate := func(keyfunc.Request) (string, error) { return keys[n.Add(1)%pool], nil }
	roomy := []core.Rule{{Limit: 100_000, Window: time.Hour}}

	b.Run("bare", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := handler(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("guard-only", func(b *testing.B) {
		// guard.Guard.Admit alone, for the adapter's share of the cost.
		g := guard.New(testkit.Limiter(b, core.NewMemoryStore(), core.Policy{Name: "bench", Rules: roomy}), guard.WithKey(rotate))
		r := grpclimit.Request(ctx, emptyCall)
		b.ReportAllocs()
		for b.Loop() {
			if v := g.Admit(ctx, r); v.Outcome != guard.OutcomeAllow {
				b.Fatalf("Check = %v, want allow", v.Outcome)
			}
		}
	})
	b.Run("allowed", func(b *testing.B) {
		icpt := grpclimit.UnaryServerInterceptor(testkit.Limiter(b, core.NewMemoryStore(), core.Policy{Name: "bench", Rules: roomy}), guard.WithKey(rotate))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := icpt(ctx, req, info, handler); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("one-peer", func(b *testing.B) {
		// The case of the bench harness's middleware section: the default
		// key (the peer's IP, one client) and headers, a limit never
		// reached, so that the sliding log stays short and the cost is the
		// interceptor's own rather than the store's.
		icpt := grpclimit.UnaryServerInterceptor(testkit.Limiter(b, core.NewMemoryStore(),
			core.Policy{Name: "bench", Rules: []core.Rule{{Limit: 100_000, Window: time.Millisecond}}}))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := icpt(ctx, req, info, handler); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("allowed-ietf", func(b *testing.B) {
		icpt := grpclimit.UnaryServerInterceptor(testkit.Limiter(b, core.NewMemoryStore(), core.Policy{Name: "bench", Rules: roomy}),
			guard.WithKey(rotate), guard.WithHeaders(guard.HeadersIETF))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := icpt(ctx, req, info, handler); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("other-method", func(b *testing.B) {
		// A method outside WithMethods passes straight through.
		icpt := grpclimit.UnaryServerInterceptor(testkit.Limiter(b, core.NewMemoryStore(), core.Policy{Name: "bench", Rules: roomy}),
			guard.WithKey(rotate), grpclimit.WithMethods(unaryCall))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := icpt(ctx, req, info, handler); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("denied", func(b *testing.B) {
		// One key over its limit: answered from the deny cache.
		icpt := grpclimit.UnaryServerInterceptor(testkit.Limiter(b, core.NewMemoryStore(), core.Policy{Name: "bench", Rules: []core.Rule{{Limit: 1, Window: time.Hour}}}),
			guard.WithKey(keyfunc.Header("x-user")))
		_, _ = icpt(ctx, req, info, handler)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := icpt(ctx, req, info, handler); err == nil {
				b.Fatal("call allowed, want denied")
			}
		}
	})
}
