package fiberlimit_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/recover"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/fiberlimit"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/test/adaptertest"
)

// handler is the suite's handler; framework errors are returned as
// *fiber.Error for fiber's error handler to write.
func handler(c *fiber.Ctx) error {
	rep := adaptertest.ReplyTo(func(name string) string { return c.Query(name) }, c.Body())
	if rep.Panic != nil {
		panic(rep.Panic)
	}
	switch rep.Error {
	case adaptertest.FrameworkError:
		return fiber.NewError(rep.Status, rep.Body)
	case adaptertest.PlainError:
		return adaptertest.ErrPlain
	}
	return c.Status(rep.Status).SendString(rep.Body)
}

func newApp(t *testing.T, l *core.Limiter, o adaptertest.Options, cfg ...fiber.Config) *fiber.App {
	opts := o.GuardOptions()
	if o.DenyHandler {
		opts = append(opts, fiberlimit.WithDenyHandler(func(c *fiber.Ctx, v *guard.Verdict) error {
			status, body := adaptertest.DenyReply(v)
			return c.Status(status).SendString(body)
		}))
	}
	if o.ChallengeHandler {
		opts = append(opts, fiberlimit.WithChallengeHandler(func(c *fiber.Ctx, v *guard.Verdict) error {
			status, body := adaptertest.ChallengeReply(v)
			return c.Status(status).SendString(body)
		}))
	}
	app := fiber.New(cfg...)
	app.Use(recover.New())
	chain := []fiber.Handler{fiberlimit.New(l, opts...), handler}
	if o.Outer != nil {
		chain = append([]fiber.Handler{fiberlimit.New(o.Outer.Limiter, o.Outer.Options.GuardOptions()...)}, chain...)
	}
	if o.AnyMethod {
		app.All(adaptertest.Path, chain...)
	} else {
		app.Get(adaptertest.Path, chain...)
		app.Post(adaptertest.Path, chain...)
	}
	return app
}

// serve serves app on a loopback listener until the test ends.
func serve(t *testing.T, app *fiber.App) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = app.Listener(ln)
	}()
	t.Cleanup(func() {
		_ = app.ShutdownWithTimeout(5 * time.Second)
		<-done
	})
	return "http://" + ln.Addr().String()
}

func newServer(t *testing.T, l *core.Limiter, o adaptertest.Options) string {
	return serve(t, newApp(t, l, o, fiber.Config{DisableStartupMessage: true}))
}

func TestConformance(t *testing.T) { adaptertest.Run(t, newServer) }

func TestOneLiners(t *testing.T) {
	adaptertest.RunOneLiners(t, adaptertest.OneLiners[fiber.Handler]{
		LimitByIP:     fiberlimit.LimitByIP,
		LimitByAppKey: fiberlimit.LimitByAppKey,
		LimitByUser:   fiberlimit.LimitByUser,
		UseStore:      fiberlimit.UseStore,
	}, func(t *testing.T, limit fiber.Handler) adaptertest.Call {
		auth := func(c *fiber.Ctx) error {
			if u := c.Get(adaptertest.UserHeader); u != "" {
				c.Locals(adaptertest.UserKey, strings.Clone(u))
			}
			return c.Next()
		}
		app := fiber.New(fiber.Config{DisableStartupMessage: true})
		app.Get(adaptertest.Path, auth, limit, handler)
		return adaptertest.HTTPCall(t, serve(t, app))
	})
}
