package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/grpclimit"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/test/outboundtest"
)

// outboundPartner is the outbound suite's server over gRPC: a partner,
// and when calls (or streams, when stream is set) left the client
// interceptor in front of it.
type outboundPartner struct {
	*partner
	outboundtest.Departures
	stream bool
}

func (p *outboundPartner) Arrived() int { return int(p.calls.Load()) }

// Client returns a Send that makes an EmptyCall, or opens a
// StreamingOutputCall of one message and reads it to its end, through the
// client interceptor of l, with header as the call's metadata.
func (p *outboundPartner) Client(t *testing.T, l *core.Limiter, opts ...guard.Option) outboundtest.Send {
	var chain grpc.DialOption
	if p.stream {
		chain = grpc.WithChainStreamInterceptor(grpclimit.StreamClientInterceptor(l, opts...),
			func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				p.Leave()
				return streamer(ctx, desc, cc, method, opts...)
			})
	} else {
		chain = grpc.WithChainUnaryInterceptor(grpclimit.UnaryClientInterceptor(l, opts...),
			func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				p.Leave()
				return invoker(ctx, method, req, reply, cc, opts...)
			})
	}
	cc, err := grpc.NewClient(p.target, grpc.WithTransportCredentials(insecure.NewCredentials()), chain)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	c := testpb.NewTestServiceClient(cc)
	return func(ctx context.Context, header map[string]string) error {
		for k, v := range header {
			ctx = metadata.AppendToOutgoingContext(ctx, strings.ToLower(k), v)
		}
		if !p.stream {
			_, err := c.EmptyCall(ctx, &testpb.Empty{})
			return err
		}
		stream, err := c.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{ResponseParameters: []*testpb.ResponseParameters{{}}})
		if err != nil {
			return err
		}
		for {
			if _, err := stream.Recv(); err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}
				return err
			}
		}
	}
}

// clientRefusals are the status of a call the client interceptors
// refused, by why: a code and a fixed message.
var clientRefusals = map[outboundtest.Refusal]struct {
	code codes.Code
	msg  string
}{
	outboundtest.Deadline:  {codes.DeadlineExceeded, "deadline exceeded while waiting for the rate limit"},
	outboundtest.Canceled:  {codes.Canceled, "call canceled while waiting for the rate limit"},
	outboundtest.Blocked:   {codes.PermissionDenied, "blocked"},
	outboundtest.Invalid:   {codes.InvalidArgument, "missing or malformed rate-limit key or cost"},
	outboundtest.NeverFits: {codes.ResourceExhausted, "request cost can never fit the rate limit"},
}

// clientRefused checks the status of a call the client interceptors
// refused, and that its error says "ratekit:" once.
func clientRefused(err error, why outboundtest.Refusal) string {
	want, ok := clientRefusals[why]
	if !ok {
		return fmt.Sprintf("no status known for %v", why)
	}
	if st := status.Convert(err); st.Code() != want.code || st.Message() != want.msg {
		return fmt.Sprintf("status %v %q, want %v %q", st.Code(), st.Message(), want.code, want.msg)
	}
	if n := strings.Count(err.Error(), "ratekit: "); n != 1 {
		return fmt.Sprintf("the error %q says ratekit %d times, want once", err, n)
	}
	return ""
}

func TestOutbound(t *testing.T) {
	for _, tc := range []struct {
		constructor string
		stream      bool
	}{
		{"UnaryClientInterceptor", false},
		{"StreamClientInterceptor", true},
	} {
		t.Run(tc.constructor, func(t *testing.T) {
			outboundtest.Run(t, outboundtest.Harness{
				Constructor: tc.constructor,
				Start: func(t *testing.T) outboundtest.Server {
					return &outboundPartner{partner: newPartner(t), stream: tc.stream}
				},
				Refused: clientRefused,
			})
		})
	}
}
