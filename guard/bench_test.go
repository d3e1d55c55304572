package guard_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/testkit"
)

// BenchmarkAdmitHTTP measures the pipeline of the HTTP adapters on the
// allowed path, without a framework: the default key (the client IP),
// one decision on a memory store with a limit never reached, and the
// X-RateLimit fields written to a header map that is reused, as a
// server's is not, so that the map's growth does not count.
func BenchmarkAdmitHTTP(b *testing.B) {
	l := testkit.Limiter(b, core.NewMemoryStore(), core.Policy{Name: "bench",
		Rules: []core.Rule{{Limit: 100_000, Window: time.Millisecond}}})
	g := guard.New(l)
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
