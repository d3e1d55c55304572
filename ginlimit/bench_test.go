package ginlimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/ginlimit"
	"github.com/ratekit/ratekit/internal/test/adaptertest"
)

// BenchmarkMiddleware compares a gin route without and with the
// middleware on the allowed path (memory store, a limit never reached).
func BenchmarkMiddleware(b *testing.B) {
	gin.SetMode(gin.ReleaseMode)
	ok := gin.WrapF(adaptertest.BenchHandler)
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	b.Run("bare", func(b *testing.B) {
		r := gin.New()
		r.GET("/", ok)
		adaptertest.ServeBench(b, r, req)
	})
	b.Run("ratekit", func(b *testing.B) {
		r := gin.New()
		r.GET("/", ginlimit.New(adaptertest.BenchLimiter(b)), ok)
		adaptertest.ServeBench(b, r, req)
	})
}
