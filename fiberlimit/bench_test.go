package fiberlimit_test

import (
	"net"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/ratekit/ratekit/fiberlimit"
	"github.com/ratekit/ratekit/internal/test/adaptertest"
)

// BenchmarkMiddleware compares a trivial fiber route without and with the
// middleware on the allowed path (memory store, a limit never reached),
// served in-process through app.Handler().
func BenchmarkMiddleware(b *testing.B) {
	ok := func(c *fiber.Ctx) error { return c.SendString("ok") }
	run := func(b *testing.B, app *fiber.App) {
		serve := serveOne(b, app, net.IPv4(192, 0, 2, 1))
		b.ReportAllocs()
		for b.Loop() {
			serve()
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

// serveOne returns a function that serves app one GET / from ip through
// app.Handler(), in-process, on one reused request context, failing tb
// on a status other than 200.
func serveOne(tb testing.TB, app *fiber.App, ip net.IP) func() {
	h := app.Handler()
	var req fasthttp.Request
	req.Header.SetMethod(fiber.MethodGet)
	req.SetRequestURI("/")
	ctx := new(fasthttp.RequestCtx)
	ctx.Init(&req, &net.TCPAddr{IP: ip, Port: 1234}, nil)
	return func() {
		h(ctx)
		if s := ctx.Response.StatusCode(); s != fiber.StatusOK {
			tb.Fatalf("status %d", s)
		}
		ctx.Response.Reset()
	}
}
