package fiberlimit_test

import (
	"net"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/ratekit/ratekit/fiberlimit"
	"github.com/ratekit/ratekit/internal/adaptertest"
)

// BenchmarkMiddleware compares a trivial fiber route without and with the
// middleware on the allowed path (memory store, a limit never reached),
// served in-process through app.Handler().
func BenchmarkMiddleware(b *testing.B) {
	ok := func(c *fiber.Ctx) error { return c.SendString("ok") }
	run := func(b *testing.B, app *fiber.App) {
		h := app.Handler()
		var req fasthttp.Request
		req.Header.SetMethod(fiber.MethodGet)
		req.SetRequestURI("/")
		var ctx fasthttp.RequestCtx
		ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1234}, nil)
		b.ReportAllocs()
		for b.Loop() {
			h(&ctx)
			if s := ctx.Response.StatusCode(); s != fiber.StatusOK {
				b.Fatalf("status %d", s)
			}
			ctx.Response.Reset()
		}
	}
	b.Run("bare", func(b *testing.B) {
		app := fiber.New()
		app.Get("/", ok)
		run(b, app)
	})
	b.Run("ratekit", func(b *testing.B) {
		app := fiber.New()
		app.Get("/", fiberlimit.New(adaptertest.BenchLimiter(b)), ok)
		run(b, app)
	})
}
