package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/grpclimit"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/testkit"
	"github.com/ratekit/ratekit/keyfunc"
)

// partner is a stand-in for a partner's gRPC server: the test service on
// a loopback port, counting the calls and streams that reach it.
type partner struct {
	target string
	calls  atomic.Int64
}

func newPartner(t *testing.T) *partner {
	t.Helper()
	p := &partner{}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			p.calls.Add(1)
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			p.calls.Add(1)
			return h(srv, ss)
		}),
	)
	testpb.RegisterTestServiceServer(srv, testService{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	p.target = "passthrough:///" + lis.Addr().String()
	return p
}

// dial returns a client of p whose calls and streams are throttled by l.
func (p *partner) dial(t *testing.T, l *core.Limiter, opts ...guard.Option) testpb.TestServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(p.target,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(grpclimit.UnaryClientInterceptor(l, opts...)),
		grpc.WithChainStreamInterceptor(grpclimit.StreamClientInterceptor(l, opts...)),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return testpb.NewTestServiceClient(cc)
}

// TestClientFleet: 4 instances x 5 goroutines call one partner through
// one limit, keyed by the connection's target. With 10 per hour and 5 s
// to wait, exactly 10 calls reach it and the others fail at once with
// DeadlineExceeded; with 5 per 200 ms and no deadline, every call and
// stream waits its turn and reaches it.
func TestClientFleet(t *testing.T) {
	const n, m = 4, 5
	for _, f := range testkit.Backends() {
		t.Run(f.Name, func(t *testing.T) {
			t.Parallel()
			t.Run("deadline", func(t *testing.T) {
				p := newPartner(t)
				ls := testkit.Fleet(t, n, f, core.Policy{Name: "hour", Rules: []core.Rule{{Limit: 10, Window: time.Hour}}})
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				var ok, late atomic.Int64
				var wg sync.WaitGroup
				for _, l := range ls {
					c := p.dial(t, l)
					for range m {
						wg.Go(func() {
							_, err := c.EmptyCall(ctx, &testpb.Empty{})
							switch {
							case err == nil:
								ok.Add(1)
							case status.Code(err) == codes.DeadlineExceeded && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
								late.Add(1)
							default:
								t.Errorf("EmptyCall = %v (context: %v), want OK or DeadlineExceeded before the deadline", err, ctx.Err())
							}
						})
					}
				}
				wg.Wait()
				if ok.Load() != 10 || late.Load() != n*m-10 || p.calls.Load() != 10 {
					t.Errorf("%d calls made, %d failed fast, %d reached the partner; want 10, %d, 10", ok.Load(), late.Load(), p.calls.Load(), n*m-10)
				}
			})
			t.Run("wait", func(t *testing.T) {
				p := newPartner(t)
				obs := &testkit.Events{}
				ls := testkit.Fleet(t, n, f, core.Policy{Name: "burst", Rules: []core.Rule{{Limit: 5, Window: 200 * time.Millisecond}}}, core.WithObserver(obs))
				var wg sync.WaitGroup
				for _, l := range ls {
					c := p.dial(t, l)
					for i := range m {
						wg.Go(func() {
							if i%2 == 0 {
								if _, err := c.EmptyCall(context.Background(), &testpb.Empty{}); err != nil {
									t.Errorf("EmptyCall = %v, want OK after waiting", err)
								}
								return
							}
							if _, got, err := openStream(c, "", 3); err != nil || got != 3 {
								t.Errorf("stream: %d messages, %v; want 3 after waiting", got, err)
							}
						})
					}
				}
				wg.Wait()
				if p.calls.Load() != n*m || obs.Denials() == 0 {
					t.Errorf("%d calls reached the partner after %d denials, want all %d after some waiting", p.calls.Load(), obs.Denials(), n*m)
				}
			})
		})
	}
}

// TestClientErrors: what a throttled client gets when a call cannot be
// admitted: a status with a fixed message, wrapping the cause.
func TestClientErrors(t *testing.T) {
	p := newPartner(t)
	l := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "errors", Rules: []core.Rule{{Limit: 1, Window: time.Hour}}})
	short := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), 5*time.Second)
	}

	// Keyed by metadata: one call per user.
	c := p.dial(t, l, guard.WithKey(userKey), guard.WithNoKey(guard.NoKeyReject))
	if _, err := c.EmptyCall(withUser("alice"), &testpb.Empty{}); err != nil {
		t.Fatalf("alice's first call: %v", err)
	}
	if _, err := c.EmptyCall(withUser("bob"), &testpb.Empty{}); err != nil {
		t.Fatalf("bob's first call: %v", err)
	}
	ctx, cancel := short()
	defer cancel()
	_, err := c.EmptyCall(metadata.AppendToOutgoingContext(ctx, "x-user", "alice"), &testpb.Empty{})
	if st := status.Convert(err); st.Code() != codes.DeadlineExceeded || st.Message() != "deadline exceeded while waiting for the rate limit" ||
		!errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		t.Errorf("alice's second call = %v (status %v %q), want DeadlineExceeded at once with a fixed message", err, st.Code(), st.Message())
	}
	if _, err := c.EmptyCall(context.Background(), &testpb.Empty{}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("anonymous call under NoKeyReject = %v, want InvalidArgument", err)
	}

	// A stream is charged when it opens: the second fails to open.
	s := p.dial(t, testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "streams", Rules: []core.Rule{{Limit: 1, Window: time.Hour}}}))
	if _, got, err := openStream(s, "", 5); err != nil || got != 5 {
		t.Fatalf("first stream: %d messages, %v; want 5", got, err)
	}
	_, err = s.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{})
	if status.Code(err) != codes.DeadlineExceeded || ctx.Err() != nil {
		t.Errorf("second stream = %v, want DeadlineExceeded at once on opening", err)
	}

	// Canceled while waiting.
	obs := &testkit.Events{}
	w := p.dial(t, testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "cancel", Rules: []core.Rule{{Limit: 1, Window: time.Hour}}}, core.WithObserver(obs)))
	if _, err := w.EmptyCall(context.Background(), &testpb.Empty{}); err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := w.EmptyCall(cctx, &testpb.Empty{})
		done <- err
	}()
	testkit.WaitUntil(t, "the second call waits", func() bool { return obs.Denials() > 0 })
	ccancel()
	if err := <-done; status.Code(err) != codes.Canceled || !errors.Is(err, context.Canceled) {
		t.Errorf("call canceled while waiting = %v, want Canceled", err)
	}

	// A cost that can never fit.
	e := p.dial(t, testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("cost", testkit.PerMinute(2))), guard.WithCost(func(keyfunc.Request) int64 { return 3 }))
	if _, err := e.EmptyCall(context.Background(), &testpb.Empty{}); status.Code(err) != codes.ResourceExhausted || !errors.Is(err, core.ErrInvalidCost) {
		t.Errorf("call of cost 3 on a limit of 2 = %v, want ResourceExhausted wrapping ErrInvalidCost", err)
	}
	if got := p.calls.Load(); got != 4 {
		t.Errorf("%d calls reached the partner, want 4", got)
	}
}

// TestClientMethods: WithMethods throttles only the named methods.
func TestClientMethods(t *testing.T) {
	p := newPartner(t)
	c := p.dial(t, testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "methods", Rules: []core.Rule{{Limit: 1, Window: time.Hour}}}), grpclimit.WithMethods(unaryCall))
	for range 3 {
		if _, err := c.EmptyCall(context.Background(), &testpb.Empty{}); err != nil {
			t.Fatalf("EmptyCall (not throttled) = %v", err)
		}
	}
	if _, err := c.UnaryCall(context.Background(), simpleRequest()); err != nil {
		t.Fatalf("first UnaryCall = %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.UnaryCall(ctx, simpleRequest()); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("second UnaryCall = %v, want DeadlineExceeded", err)
	}
}

// TestClientPanics: what an outgoing call cannot honour is refused when
// the interceptor is built, by a panic naming it, never at call time.
func TestClientPanics(t *testing.T) {
	l := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("panics", testkit.PerMinute(1)))
	conc := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "conc", InFlight: 1})
	for name, tc := range map[string]struct {
		f    func()
		want string // in the panic's message
	}{
		"nil limiter": {func() { grpclimit.UnaryClientInterceptor(nil) }, "nil"},
		"WithCountIf": {func() {
			grpclimit.StreamClientInterceptor(l, grpclimit.WithCountIf(func(codes.Code) bool { return true }))
		}, "WithCountIf"},
		"WithResetIf": {func() {
			grpclimit.UnaryClientInterceptor(l, grpclimit.WithResetIf(func(codes.Code) bool { return true }))
		}, "WithResetIf"},
		"InFlight": {func() { grpclimit.UnaryClientInterceptor(conc) }, `InFlight policy "conc"`},
		"WithDenyHandler": {func() {
			grpclimit.UnaryClientInterceptor(l, grpclimit.WithDenyHandler(func(context.Context, *guard.Verdict) error { return nil }))
		}, "WithDenyHandler"},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				p := recover()
				if msg := fmt.Sprint(p); p == nil || !strings.Contains(msg, tc.want) || !strings.Contains(msg, "ClientInterceptor") {
					t.Errorf("client interceptor with %s: panic %v, want one naming %q", name, p, tc.want)
				}
			}()
			tc.f()
		})
	}
}

// TestClientBlock: WithBlock refuses a call before it waits or reaches
// the server, with PermissionDenied and an error wrapping
// guard.ErrBlocked.
func TestClientBlock(t *testing.T) {
	p := newPartner(t)
	banned := func(r keyfunc.Request) bool { return r.Header("x-tenant") == "banned" }
	c := p.dial(t, testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("block", testkit.PerMinute(5))), guard.WithBlock(banned))
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-tenant", "banned")
	if _, err := c.UnaryCall(ctx, simpleRequest()); status.Code(err) != codes.PermissionDenied || !errors.Is(err, guard.ErrBlocked) {
		t.Errorf("blocked UnaryCall = %v, want PermissionDenied wrapping guard.ErrBlocked", err)
	}
	if _, err := c.UnaryCall(context.Background(), simpleRequest()); err != nil {
		t.Errorf("UnaryCall = %v, want nil", err)
	}
	if n := p.calls.Load(); n != 1 {
		t.Errorf("%d calls reached the server, want 1", n)
	}
}

// TestClientAlsoHoldsWhenSent: with WithAlso, every limit holds when a
// call goes on. A limit of 3 per 200 ms and another of 12 per second,
// full at first: 18 concurrent calls never send more than 3 within
// 200 ms, although the second limit frees 12 at once.
func TestClientAlsoHoldsWhenSent(t *testing.T) {
	t.Parallel()
	p := newPartner(t)
	store := core.NewMemoryStore()
	per := testkit.Limiter(t, store, core.Policy{Name: "per", Rules: []core.Rule{{Limit: 3, Window: 200 * time.Millisecond}}})
	global := testkit.Limiter(t, store, core.Policy{Name: "global", Rules: []core.Rule{{Limit: 12, Window: time.Second}}})
	if _, err := global.AllowN(context.Background(), "all", 12); err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		times []time.Time
	)
	cc, err := grpc.NewClient(p.target,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(
			grpclimit.UnaryClientInterceptor(per, guard.WithAlso(global, func(keyfunc.Request) (string, error) { return "all", nil })),
			// After the limit: when the call leaves.
			func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				mu.Lock()
				times = append(times, time.Now())
				mu.Unlock()
				return invoker(ctx, method, req, reply, cc, opts...)
			}),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	c := testpb.NewTestServiceClient(cc)
	var wg sync.WaitGroup
	for range 18 {
		wg.Go(func() {
			if _, err := c.UnaryCall(context.Background(), simpleRequest()); err != nil {
				t.Errorf("UnaryCall = %v", err)
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	for i := range times {
		n := 0
		for j := i; j < len(times) && times[j].Sub(times[i]) < 180*time.Millisecond; j++ {
			n++
		}
		if n > 3 {
			t.Fatalf("%d calls left within 180 ms; the first limit allows 3 per 200 ms", n)
		}
	}
	if len(times) != 18 {
		t.Errorf("%d calls left, want 18", len(times))
	}
}
