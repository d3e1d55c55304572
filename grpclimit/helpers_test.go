package grpclimit_test

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/ratekit/ratekit/keyfunc"
)

// Full method names of the test service.
const (
	emptyCall     = testpb.TestService_EmptyCall_FullMethodName
	unaryCall     = testpb.TestService_UnaryCall_FullMethodName
	cacheableCall = testpb.TestService_CacheableUnaryCall_FullMethodName
	streamingCall = testpb.TestService_StreamingOutputCall_FullMethodName
)

// testService answers EmptyCall, UnaryCall and CacheableUnaryCall (with the
// status the request asks for) and StreamingOutputCall (one message per
// response parameter, then the status the request asks for).
type testService struct {
	testpb.UnimplementedTestServiceServer
}

func (testService) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	return &testpb.Empty{}, nil
}

func (testService) UnaryCall(_ context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	if s := req.GetResponseStatus(); s.GetCode() != 0 {
		return nil, status.Error(codes.Code(s.GetCode()), s.GetMessage())
	}
	return &testpb.SimpleResponse{}, nil
}

func (s testService) CacheableUnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return s.UnaryCall(ctx, req)
}

func (testService) StreamingOutputCall(req *testpb.StreamingOutputCallRequest, stream grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	for range req.GetResponseParameters() {
		if err := stream.Send(&testpb.StreamingOutputCallResponse{}); err != nil {
			return err
		}
	}
	if s := req.GetResponseStatus(); s.GetCode() != 0 {
		return status.Error(codes.Code(s.GetCode()), s.GetMessage())
	}
	return nil
}

// serve starts a gRPC server with the test service on lis and returns a
// client connected through dial.
func serve(t *testing.T, lis net.Listener, target string, dial []grpc.DialOption, opts ...grpc.ServerOption) testpb.TestServiceClient {
	t.Helper()
	srv := grpc.NewServer(opts...)
	testpb.RegisterTestServiceServer(srv, testService{})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	dial = append(dial, grpc.WithTransportCredentials(insecure.NewCredentials()))
	cc, err := grpc.NewClient(target, dial...)
	if err != nil {
		t.Fatalf("grpc.NewClient(%q) = %v", target, err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return testpb.NewTestServiceClient(cc)
}

// serveBufconn serves the test service in memory. The peer address of
// calls is "bufconn", which is no IP: tests over bufconn key by metadata.
func serveBufconn(t *testing.T, opts ...grpc.ServerOption) testpb.TestServiceClient {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	dial := grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) })
	return serve(t, lis, "passthrough:///bufnet", []grpc.DialOption{dial}, opts...)
}

// serveTCP serves the test service on a 127.0.0.1 loopback port.
func serveTCP(t *testing.T, opts ...grpc.ServerOption) testpb.TestServiceClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("net.Listen = %v", err)
	}
	return serve(t, lis, "passthrough:///"+lis.Addr().String(), nil, opts...)
}

// userKey keys calls by the x-user metadata. keyfunc.Header asks for
// "X-User": the view matches names in lowercase.
var userKey = keyfunc.Header("x-user")

// withUser returns a context for a call by user ("" for an anonymous call).
func withUser(user string) context.Context {
	ctx := context.Background()
	if user != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-user", user)
	}
	return ctx
}

// callEmpty makes an EmptyCall by user and returns the response header
// metadata and the error.
func callEmpty(c testpb.TestServiceClient, user string) (metadata.MD, error) {
	var hdr metadata.MD
	_, err := c.EmptyCall(withUser(user), &testpb.Empty{}, grpc.Header(&hdr))
	return hdr, err
}

// callUnary makes a UnaryCall by user that the handler answers with code.
func callUnary(c testpb.TestServiceClient, user string, code codes.Code) (metadata.MD, error) {
	var hdr metadata.MD
	req := &testpb.SimpleRequest{}
	if code != codes.OK {
		req.ResponseStatus = &testpb.EchoStatus{Code: int32(code), Message: "handler says " + code.String()}
	}
	_, err := c.UnaryCall(withUser(user), req, grpc.Header(&hdr))
	return hdr, err
}

// openStream opens a StreamingOutputCall by user asking for n messages and
// reads them all; it returns the header metadata, the messages received
// and the stream's final error (nil for a clean end).
func openStream(c testpb.TestServiceClient, user string, n int) (metadata.MD, int, error) {
	req := &testpb.StreamingOutputCallRequest{ResponseParameters: make([]*testpb.ResponseParameters, n)}
	for i := range req.ResponseParameters {
		req.ResponseParameters[i] = &testpb.ResponseParameters{}
	}
	stream, err := c.StreamingOutputCall(withUser(user), req)
	if err != nil {
		return nil, 0, err
	}
	got := 0
	for {
		_, err = stream.Recv()
		if err != nil {
			break
		}
		got++
	}
	hdr, _ := stream.Header()
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return hdr, got, err
}

// details returns the RetryInfo and QuotaFailure details of err.
func details(err error) (*errdetails.RetryInfo, *errdetails.QuotaFailure) {
	var (
		ri *errdetails.RetryInfo
		qf *errdetails.QuotaFailure
	)
	for _, d := range status.Convert(err).Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			ri = d
		case *errdetails.QuotaFailure:
			qf = d
		}
	}
	return ri, qf
}

// violations returns the QuotaFailure violations of err's status, each as
// "subject: description".
func violations(err error) []string {
	_, qf := details(err)
	var got []string
	for _, v := range qf.GetViolations() {
		got = append(got, v.GetSubject()+": "+v.GetDescription())
	}
	return got
}

// errStoreDown is the error of a store that is down.
var errStoreDown = errors.New("store down: secret internal detail")

// testpbClient is the test service's client.
type testpbClient = testpb.TestServiceClient

func simpleRequest() *testpb.SimpleRequest { return &testpb.SimpleRequest{} }
