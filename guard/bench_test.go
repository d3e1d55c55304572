package guard_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// BenchmarkAdmitHTTP measures the pipeline of the HTTP adapters on the
// allowed path, without a framework: the default key (the client IP),
// one decision on a memory store with a limit never reached, and the
// X-RateLimit fields written to a header map that is reused, as a
// server's is not, so that the map's growth does not count.
// The ietf case writes the IETF fields of a policy of two rules instead.
func BenchmarkAdmitHTTP(b *testing.B) {
	b.Run("xratelimit", func(b *testing.B) {
		benchAdmitHTTP(b, []core.Rule{{Limit: 100_000, Window: time.Millisecond}})
	})
	b.Run("ietf", func(b *testing.B) {
		benchAdmitHTTP(b, []core.Rule{{Limit: 100_000, Window: time.Millisecond}, {Limit: 100_000, Window: 2 * time.Millisecond}},
			guard.WithHeaders(guard.HeadersIETF))
	})
}

func benchAdmitHTTP(b *testing.B, rules []core.Rule, opts ...guard.Option) {
	l := testkit.Limiter(b, core.NewMemoryStore(), core.Policy{Name: "bench", Rules: rules})
	g := guard.New(l, opts...)
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	ctx := context.Background()
	h := make(http.Header)
	b.ReportAllocs()
	for b.Loop() {
		clear(h)
		v := g.AdmitHTTP(ctx, req, "", nil)
		if !v.Proceed() {
			b.Fatalf("outcome %v", v.Outcome)
		}
		v.WriteHTTPHeaders(h)
	}
}

// BenchmarkMetadata measures the header fields of an admission written as
// gRPC metadata, a new map each time as the gRPC interceptors hand it to
// grpc.SetHeader: the X-RateLimit fields (the default), and the IETF
// fields of a policy of one rule.
func BenchmarkMetadata(b *testing.B) {
	b.Run("xratelimit", func(b *testing.B) { benchMetadata(b) })
	b.Run("ietf", func(b *testing.B) { benchMetadata(b, guard.WithHeaders(guard.HeadersIETF)) })
}

var metadataSink map[string][]string

func benchMetadata(b *testing.B, opts ...guard.Option) {
	l := testkit.Limiter(b, core.NewMemoryStore(), core.Policy{Name: "bench", Rules: []core.Rule{{Limit: 100_000, Window: time.Hour}}})
	v := guard.New(l, opts...).AdmitHTTP(context.Background(), httptest.NewRequest(http.MethodGet, "/", nil), "", nil)
	if !v.Proceed() {
		b.Fatalf("outcome %v", v.Outcome)
	}
	b.ReportAllocs()
	for b.Loop() {
		metadataSink = v.Metadata()
	}
}
