package grpclimit_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/grpclimit"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// TestChallenge: a call reaching the Challenge ends with Unauthenticated,
// an ErrorInfo of reason CHALLENGE_REQUIRED naming the policy, the
// rate-limit metadata and no retry-after nor RetryInfo; it consumed
// nothing. After a pass the calls go on up to the limit, then
// ResourceExhausted. WithChallengeHandler replaces the status, and a nil
// error from it keeps the default.
func TestChallenge(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		handler  func(context.Context, *guard.Verdict) error
		wantCode codes.Code
		wantMsg  string
	}{
		{"default", nil, codes.Unauthenticated, "challenge required"},
		{"nil keeps the default", func(context.Context, *guard.Verdict) error { return nil }, codes.Unauthenticated, "challenge required"},
		{"custom status", func(_ context.Context, v *guard.Verdict) error {
			return status.Errorf(codes.FailedPrecondition, "solve the captcha for %s", v.ItemName())
		}, codes.FailedPrecondition, "solve the captcha for login-grpc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "login-grpc", Rules: []core.Rule{{Limit: 3, Window: time.Minute, Challenge: 2}}})
			opts := []guard.Option{guard.WithKey(userKey)}
			if tc.handler != nil {
				opts = append(opts, grpclimit.WithChallengeHandler(tc.handler))
			}
			c := serveBufconn(t, grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(l, opts...)))
			if _, err := callEmpty(c, "alice"); err != nil {
				t.Fatalf("call 1: EmptyCall = %v, want OK", err)
			}
			for i := range 2 {
				md, err := callEmpty(c, "alice")
				st := status.Convert(err)
				if st.Code() != tc.wantCode || st.Message() != tc.wantMsg {
					t.Fatalf("challenged call %d: EmptyCall = %v, want %v %q", i+1, err, tc.wantCode, tc.wantMsg)
				}
				if md.Get("retry-after") != nil || !slices.Equal(md.Get("x-ratelimit-remaining"), []string{"2"}) {
					t.Errorf("challenged call %d: metadata %v, want x-ratelimit-remaining 2 and no retry-after", i+1, md)
				}
				if tc.wantCode != codes.Unauthenticated {
					continue
				}
				var info *errdetails.ErrorInfo
				for _, d := range st.Details() {
					switch d := d.(type) {
					case *errdetails.ErrorInfo:
						info = d
					case *errdetails.RetryInfo:
						t.Errorf("challenged call %d: RetryInfo %v, want none: waiting passes no challenge", i+1, d)
					}
				}
				if info == nil || info.GetReason() != grpclimit.ChallengeReason || info.GetDomain() != "ratekit" || info.GetMetadata()["policy"] != "login-grpc" {
					t.Errorf("challenged call %d: ErrorInfo %v, want reason %s, domain ratekit, policy login-grpc", i+1, info, grpclimit.ChallengeReason)
				}
			}
			if err := l.Pass(context.Background(), "alice"); err != nil {
				t.Fatal(err)
			}
			for i := range 2 {
				if _, err := callEmpty(c, "alice"); err != nil {
					t.Fatalf("call %d after Pass: EmptyCall = %v, want OK", i+2, err)
				}
			}
			if _, err := callEmpty(c, "alice"); status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("call 4 after Pass: EmptyCall = %v, want ResourceExhausted", err)
			}
		})
	}
}
