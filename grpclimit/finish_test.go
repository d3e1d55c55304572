package grpclimit_test

import (
	"context"
	"errors"
	"io"
	"slices"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/grpclimit"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/keyfunc"
)

// Recovery interceptors, as go-grpc-middleware's recovery: a panic ends
// the call with codes.Internal.
func recoverUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = status.Error(codes.Internal, "internal error")
		}
	}()
	return h(ctx, req)
}

func recoverStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = status.Error(codes.Internal, "internal error")
		}
	}()
	return h(srv, ss)
}

// Handlers that panic when the call carries x-panic metadata, standing in
// for a panicking service method.
func panicUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if len(metadata.ValueFromIncomingContext(ctx, "x-panic")) > 0 {
		panic("handler panic")
	}
	return h(ctx, req)
}

func panicStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if len(metadata.ValueFromIncomingContext(ss.Context(), "x-panic")) > 0 {
		panic(errors.New("handler panic"))
	}
	return h(srv, ss)
}

// call makes a unary call or opens a stream (reading it to its end) by
// user "u", answered with code, panicking when panics is set; it returns
// the header and trailer metadata and the call's error.
type call func(c testpbClient, code codes.Code, panics bool) (hdr, tr metadata.MD, err error)

func callUnaryMD(c testpbClient, code codes.Code, panics bool) (hdr, tr metadata.MD, err error) {
	ctx := withUser("u")
	if panics {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-panic", "1")
	}
	req := simpleRequest()
	if code != codes.OK {
		req.ResponseStatus = &testpb.EchoStatus{Code: int32(code)}
	}
	_, err = c.UnaryCall(ctx, req, grpc.Header(&hdr), grpc.Trailer(&tr))
	return hdr, tr, err
}

func callStreamMD(c testpbClient, code codes.Code, panics bool) (hdr, tr metadata.MD, err error) {
	ctx := withUser("u")
	if panics {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-panic", "1")
	}
	req := &testpb.StreamingOutputCallRequest{ResponseParameters: []*testpb.ResponseParameters{{}}}
	if code != codes.OK {
		req.ResponseStatus = &testpb.EchoStatus{Code: int32(code)}
	}
	stream, err := c.StreamingOutputCall(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	for err == nil {
		_, err = stream.Recv()
	}
	hdr, _ = stream.Header()
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return hdr, stream.Trailer(), err
}

// TestPanicFinishes: a handler panic is finished as codes.Internal, so
// that count-if refunds it, and the panic still reaches the recovery
// interceptor.
func TestPanicFinishes(t *testing.T) {
	t.Parallel()
	authFailures := grpclimit.WithCountIf(func(c codes.Code) bool { return c == codes.Unauthenticated })
	tests := []struct {
		name  string
		serve func(t *testing.T, opts ...guard.Option) testpbClient
		call  call
	}{
		{"unary", func(t *testing.T, opts ...guard.Option) testpbClient {
			return serveBufconn(t, grpc.ChainUnaryInterceptor(recoverUnary,
				grpclimit.UnaryServerInterceptor(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("panic-unary", testkit.PerMinute(1))), opts...), panicUnary))
		}, callUnaryMD},
		{"stream", func(t *testing.T, opts ...guard.Option) testpbClient {
			return serveBufconn(t, grpc.ChainStreamInterceptor(recoverStream,
				grpclimit.StreamServerInterceptor(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("panic-stream", testkit.PerMinute(1))), opts...), panicStream))
		}, callStreamMD},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := tc.serve(t, guard.WithKey(userKey), authFailures)
			if _, _, err := tc.call(c, codes.OK, true); status.Code(err) != codes.Internal {
				t.Fatalf("panicking call = %v, want the recovery interceptor's Internal", err)
			}
			var got []codes.Code
			for range 2 {
				_, _, err := tc.call(c, codes.Unauthenticated, false)
				got = append(got, status.Code(err))
			}
			if want := []codes.Code{codes.Unauthenticated, codes.ResourceExhausted}; !slices.Equal(got, want) {
				t.Errorf("auth failures after the panic: %v, want %v (the panic is refunded)", got, want)
			}
		})
	}
}

// Interceptors that send the response headers before the limiter runs.
func sendHeadersUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := grpc.SendHeader(ctx, metadata.Pairs("early", "1")); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func sendHeadersStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := ss.SendHeader(metadata.Pairs("early", "1")); err != nil {
		return err
	}
	return h(srv, ss)
}

// TestMetadataAfterHeadersSent: when an earlier interceptor already sent
// the headers, the rate-limit fields go in the trailers.
func TestMetadataAfterHeadersSent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		serve func(t *testing.T) testpbClient
		call  call
	}{
		{"unary", func(t *testing.T) testpbClient {
			return serveBufconn(t, grpc.ChainUnaryInterceptor(sendHeadersUnary,
				grpclimit.UnaryServerInterceptor(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("early-unary", testkit.PerMinute(1))), guard.WithKey(userKey))))
		}, callUnaryMD},
		{"stream", func(t *testing.T) testpbClient {
			return serveBufconn(t, grpc.ChainStreamInterceptor(sendHeadersStream,
				grpclimit.StreamServerInterceptor(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("early-stream", testkit.PerMinute(1))), guard.WithKey(userKey))))
		}, callStreamMD},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := tc.serve(t)
			hdr, tr, err := tc.call(c, codes.OK, false)
			if err != nil {
				t.Fatalf("first call = %v, want OK", err)
			}
			if !slices.Equal(hdr.Get("early"), []string{"1"}) {
				t.Fatalf("headers %v, want the early interceptor's", hdr)
			}
			if got := tr.Get("x-ratelimit-limit"); !slices.Equal(got, []string{"1"}) || !slices.Equal(tr.Get("x-ratelimit-remaining"), []string{"0"}) {
				t.Errorf("allowed call: trailers %v, want x-ratelimit-limit 1, x-ratelimit-remaining 0", tr)
			}
			_, tr, err = tc.call(c, codes.OK, false)
			if status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("second call = %v, want ResourceExhausted", err)
			}
			if tr.Get("retry-after") == nil || !slices.Equal(tr.Get("x-ratelimit-remaining"), []string{"0"}) {
				t.Errorf("denied call: trailers %v, want retry-after and x-ratelimit-remaining", tr)
			}
		})
	}
}

// TestBodyTooLargeIsInvalidArgument: a key source too large for its key
// function stays codes.InvalidArgument over gRPC (HTTP answers 413), with
// the fixed reason.
func TestBodyTooLargeIsInvalidArgument(t *testing.T) {
	t.Parallel()
	tooLarge := func(keyfunc.Request) (string, error) { return "", keyfunc.BodyTooLarge(10) }
	c := serveBufconn(t, grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("large", testkit.PerMinute(5))), guard.WithKey(tooLarge))))
	_, err := callEmpty(c, "u")
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || st.Message() != "request body too large" {
		t.Errorf("call = %v, want InvalidArgument \"request body too large\"", err)
	}
}
