package fiberlimit_test

import (
	"net"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/fiberlimit"
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
		app.Get("/", fiberlimit.New(benchLimiter(b)), ok)
		run(b, app)
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
