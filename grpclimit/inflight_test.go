package grpclimit_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/grpclimit"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// holder keeps calls carrying x-hold metadata in the handler until it is
// released, standing in for a long export.
type holder struct {
	arrived chan struct{}
	open    chan struct{}
}

func newHolder(t *testing.T) *holder {
	h := &holder{arrived: make(chan struct{}, 8), open: make(chan struct{})}
	t.Cleanup(h.release)
	return h
}

func (h *holder) release() {
	select {
	case <-h.open:
	default:
		close(h.open)
	}
}

func (h *holder) hold(ctx context.Context) {
	if len(metadata.ValueFromIncomingContext(ctx, "x-hold")) > 0 {
		h.arrived <- struct{}{}
		<-h.open
	}
}

func (h *holder) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	h.hold(ctx)
	return next(ctx, req)
}

func (h *holder) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, next grpc.StreamHandler) error {
	h.hold(ss.Context())
	return next(srv, ss)
}

// TestInFlight: an InFlight limit over gRPC, unary and stream: a call
// beyond the limit while others run ends with ResourceExhausted and the
// 1s RetryInfo hint; each call's lease is released when its handler
// returns, also when it fails or panics.
func TestInFlight(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		serve func(t *testing.T, l *core.Limiter, h *holder) testpbClient
		call  call
	}{
		{"unary", func(t *testing.T, l *core.Limiter, h *holder) testpbClient {
			return serveBufconn(t, grpc.ChainUnaryInterceptor(recoverUnary,
				grpclimit.UnaryServerInterceptor(l, guard.WithKey(userKey)), panicUnary, h.unary))
		}, callUnaryMD},
		{"stream", func(t *testing.T, l *core.Limiter, h *holder) testpbClient {
			return serveBufconn(t, grpc.ChainStreamInterceptor(recoverStream,
				grpclimit.StreamServerInterceptor(l, guard.WithKey(userKey)), panicStream, h.stream))
		}, callStreamMD},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "export-" + tc.name, InFlight: 1})
			h := newHolder(t)
			c := tc.serve(t, l, h)
			type result struct {
				hdr, tr metadata.MD
				err     error
			}
			held := make(chan result, 1)
			go func() {
				var r result
				r.hdr, r.tr, r.err = tc.call(holdClient{c}, codes.OK, false)
				held <- r
			}()
			select {
			case <-h.arrived:
			case <-time.After(10 * time.Second):
				t.Fatal("the held call did not reach the handler within 10s")
			}
			hdr, tr, err := tc.call(c, codes.OK, false)
			if status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("second call while one runs = %v, want ResourceExhausted", err)
			}
			ri, qf := details(err)
			if ri == nil || ri.GetRetryDelay().AsDuration() != time.Second {
				t.Errorf("RetryInfo %v, want the 1s hint", ri)
			}
			if qf == nil || len(qf.GetViolations()) != 1 || qf.GetViolations()[0].GetDescription() != "limit 1 in flight" {
				t.Errorf("QuotaFailure %v, want one violation \"limit 1 in flight\"", qf)
			}
			md := metadata.Join(hdr, tr)
			if !slices.Equal(md.Get("x-ratelimit-limit"), []string{"1"}) || !slices.Equal(md.Get("retry-after"), []string{"1"}) || md.Get("x-ratelimit-reset") != nil {
				t.Errorf("denied call metadata %v, want x-ratelimit-limit 1, retry-after 1, no x-ratelimit-reset", md)
			}
			h.release()
			if r := <-held; r.err != nil {
				t.Fatalf("held call = %v, want OK", r.err)
			}
			for _, end := range []struct {
				code   codes.Code
				panics bool
			}{{codes.OK, false}, {codes.NotFound, false}, {codes.OK, true}} {
				for i := range 2 {
					want := end.code
					if end.panics {
						want = codes.Internal
					}
					if _, _, err := tc.call(c, end.code, end.panics); status.Code(err) != want {
						t.Fatalf("call %d ending %v (panic %v) = %v, want %v: the previous call's lease was not released",
							i+1, end.code, end.panics, err, want)
					}
				}
			}
			if d, _ := l.Peek(context.Background(), "u"); d.Rules()[0].Used != 0 {
				t.Errorf("after every call ended: %d in flight, want 0", d.Rules()[0].Used)
			}
		})
	}
}

// holdClient adds x-hold metadata to every call.
type holdClient struct{ testpbClient }

func (c holdClient) UnaryCall(ctx context.Context, in *testpb.SimpleRequest, opts ...grpc.CallOption) (*testpb.SimpleResponse, error) {
	return c.testpbClient.UnaryCall(metadata.AppendToOutgoingContext(ctx, "x-hold", "1"), in, opts...)
}

func (c holdClient) StreamingOutputCall(ctx context.Context, in *testpb.StreamingOutputCallRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[testpb.StreamingOutputCallResponse], error) {
	return c.testpbClient.StreamingOutputCall(metadata.AppendToOutgoingContext(ctx, "x-hold", "1"), in, opts...)
}
