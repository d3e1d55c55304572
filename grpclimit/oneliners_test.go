package grpclimit_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratekit/ratekit/grpclimit"
	"github.com/ratekit/ratekit/internal/test/adaptertest"
)

// httpStatus is the HTTP status of the same answer as a gRPC code, as the
// adapter conformance suite compares them.
var httpStatus = map[codes.Code]int{
	codes.OK:                200,
	codes.ResourceExhausted: 429,
	codes.InvalidArgument:   400,
	codes.Unavailable:       503,
	codes.PermissionDenied:  403,
}

// authenticate is the suite's authentication: the x-user metadata goes
// into the call's context under adaptertest.UserKey.
func authenticate(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if u := metadata.ValueFromIncomingContext(ctx, strings.ToLower(adaptertest.UserHeader)); len(u) > 0 {
		ctx = context.WithValue(ctx, adaptertest.UserKey, u[0]) //nolint:staticcheck // the suite's one key for every adapter: echo's c.Set takes strings only
	}
	return handler(ctx, req)
}

func TestOneLiners(t *testing.T) {
	adaptertest.RunOneLiners(t, adaptertest.OneLiners[*grpclimit.Router]{
		LimitByIP:     grpclimit.LimitByIP,
		LimitByAppKey: grpclimit.LimitByAppKey,
		LimitByUser:   grpclimit.LimitByUser,
		UseStore:      grpclimit.UseStore,
	}, func(t *testing.T, lim *grpclimit.Router) adaptertest.Call {
		c := serveTCP(t, grpc.ChainUnaryInterceptor(authenticate, lim.UnaryServerInterceptor()),
			grpc.ChainStreamInterceptor(lim.StreamServerInterceptor()))
		return func(t *testing.T, h http.Header) (int, http.Header) {
			t.Helper()
			ctx := context.Background()
			for name, vs := range h {
				for _, v := range vs {
					ctx = metadata.AppendToOutgoingContext(ctx, strings.ToLower(name), v)
				}
			}
			var md metadata.MD
			_, err := c.EmptyCall(ctx, &testpb.Empty{}, grpc.Header(&md))
			fields := http.Header{}
			for name, vs := range md {
				for _, v := range vs {
					fields.Add(name, v)
				}
			}
			code := status.Code(err)
			s, ok := httpStatus[code]
			if !ok {
				t.Fatalf("EmptyCall: %v", err)
			}
			return s, fields
		}
	})
}

// A stream counts once, when it opens, against the same limit as unary
// calls.
func TestOneLinerStreams(t *testing.T) {
	t.Parallel()
	lim := grpclimit.LimitByIP(2, time.Hour)
	c := serveTCP(t, grpc.ChainUnaryInterceptor(lim.UnaryServerInterceptor()), grpc.ChainStreamInterceptor(lim.StreamServerInterceptor()))
	if _, err := c.EmptyCall(context.Background(), &testpb.Empty{}); err != nil {
		t.Fatalf("EmptyCall: %v", err)
	}
	for i, want := range []codes.Code{codes.OK, codes.ResourceExhausted} {
		stream, err := c.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = stream.Recv()
		got := status.Code(err)
		if errors.Is(err, io.EOF) { // no message asked for: the stream ended well
			got = codes.OK
		}
		if got != want {
			t.Errorf("stream %d: Recv error %v, want %v", i+1, err, want)
		}
	}
}
