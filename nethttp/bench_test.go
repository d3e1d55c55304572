package nethttp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/nethttp"
)

// BenchmarkMiddleware compares a trivial ServeMux route without and with
// the middleware on the allowed path (memory store, a limit never
// reached).
func BenchmarkMiddleware(b *testing.B) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	run := func(b *testing.B, mux *http.ServeMux) {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		b.ReportAllocs()
		for b.Loop() {
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				b.Fatalf("status %d", rec.Code)
			}
		}
	}
	b.Run("bare", func(b *testing.B) {
		mux := http.NewServeMux()
		mux.Handle("GET /{$}", ok)
		run(b, mux)
	})
	b.Run("ratekit", func(b *testing.B) {
		mux := http.NewServeMux()
		mux.Handle("GET /{$}", nethttp.New(benchLimiter(b))(ok))
		run(b, mux)
	})
	// With count-if the handler writes through the status recorder.
	b.Run("ratekit-countif", func(b *testing.B) {
		mux := http.NewServeMux()
		mux.Handle("GET /{$}", nethttp.New(benchLimiter(b), guard.WithCountIf(guard.StatusAuthFailure))(ok))
		run(b, mux)
	})
}

// benchLimiter never denies: the sliding log of one key over a 1 ms window
// stays small, so the store's cost is steady.
func benchLimiter(b *testing.B) *core.Limiter {
	l, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{
		Name:  "bench",
		Rules: []core.Rule{{Limit: 100_000, Window: time.Millisecond}},
	})
	if err != nil {
		b.Fatal(err)
	}
	return l
}
