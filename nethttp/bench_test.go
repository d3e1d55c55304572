package nethttp_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/test/adaptertest"
	"github.com/ratekit/ratekit/nethttp"
)

// BenchmarkMiddleware compares a ServeMux route without and with the
// middleware on the allowed path (memory store, a limit never reached):
// the difference is what the middleware adds to a request.
func BenchmarkMiddleware(b *testing.B) {
	ok := http.HandlerFunc(adaptertest.BenchHandler)
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	mux := func(h http.Handler) *http.ServeMux {
		m := http.NewServeMux()
		m.Handle("GET /{$}", h)
		return m
	}
	b.Run("bare", func(b *testing.B) {
		adaptertest.ServeBench(b, mux(ok), req)
	})
	b.Run("ratekit", func(b *testing.B) {
		adaptertest.ServeBench(b, mux(nethttp.New(adaptertest.BenchLimiter(b))(ok)), req)
	})
	// With count-if the handler writes through the status recorder.
	b.Run("ratekit-countif", func(b *testing.B) {
		mw := nethttp.New(adaptertest.BenchLimiter(b), guard.WithCountIf(guard.StatusAuthFailure))
		adaptertest.ServeBench(b, mux(mw(ok)), req)
	})
}
