package echolimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/echolimit"
)

// BenchmarkMiddleware compares a trivial echo route without and with the
// middleware on the allowed path (memory store, a limit never reached).
func BenchmarkMiddleware(b *testing.B) {
	ok := func(c echo.Context) error { return c.String(http.StatusOK, "ok") }
	run := func(b *testing.B, e *echo.Echo) {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		b.ReportAllocs()
		for b.Loop() {
			rec := httptest.NewRecorder()
			e.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				b.Fatalf("status %d", rec.Code)
			}
		}
	}
	b.Run("bare", func(b *testing.B) {
		e := echo.New()
		e.GET("/", ok)
		run(b, e)
	})
	b.Run("ratekit", func(b *testing.B) {
		e := echo.New()
		e.GET("/", ok, echolimit.New(benchLimiter(b)))
		run(b, e)
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
