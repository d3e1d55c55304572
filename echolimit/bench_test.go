package echolimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/ratekit/ratekit/echolimit"
	"github.com/ratekit/ratekit/internal/test/adaptertest"
)

// BenchmarkMiddleware compares an echo route without and with the
// middleware on the allowed path (memory store, a limit never reached).
func BenchmarkMiddleware(b *testing.B) {
	ok := echo.WrapHandler(http.HandlerFunc(adaptertest.BenchHandler))
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	b.Run("bare", func(b *testing.B) {
		e := echo.New()
		e.GET("/", ok)
		adaptertest.ServeBench(b, e, req)
	})
	b.Run("ratekit", func(b *testing.B) {
		e := echo.New()
		e.Use(echolimit.New(adaptertest.BenchLimiter(b)))
		e.GET("/", ok)
		adaptertest.ServeBench(b, e, req)
	})
	// Route-level middleware: echo chains it on every request; the
	// middleware keeps the handler it built for the route's handler.
	b.Run("ratekit-route", func(b *testing.B) {
		e := echo.New()
		e.GET("/", ok, echolimit.New(adaptertest.BenchLimiter(b)))
		adaptertest.ServeBench(b, e, req)
	})
}
