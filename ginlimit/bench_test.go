package ginlimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/ginlimit"
)

// BenchmarkMiddleware compares a trivial gin route without and with the
// middleware on the allowed path (memory store, a limit never reached).
func BenchmarkMiddleware(b *testing.B) {
	ok := func(c *gin.Context) { c.String(http.StatusOK, "ok") }
	run := func(b *testing.B, r *gin.Engine) {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		b.ReportAllocs()
		for b.Loop() {
			rec := httptest.NewRecorder()
			r.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				b.Fatalf("status %d", rec.Code)
			}
		}
	}
	b.Run("bare", func(b *testing.B) {
		r := gin.New()
		r.GET("/", ok)
		run(b, r)
	})
	b.Run("ratekit", func(b *testing.B) {
		r := gin.New()
		r.GET("/", ginlimit.New(benchLimiter(b)), ok)
		run(b, r)
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
