package fiberlimit_test

import (
	"net"
	"testing"

	"github.com/gofiber/fiber/v2"

	"github.com/ratekit/ratekit/fiberlimit"
	"github.com/ratekit/ratekit/internal/race"
	"github.com/ratekit/ratekit/internal/test/adaptertest"
)

// TestAllowedAllocations: on the allowed path, with the default key and
// a peer seen before, the middleware allocates nothing over fiber's own:
// the header values go to fasthttp from a pooled buffer, and the peer's
// text is the one written for its previous request.
func TestAllowedAllocations(t *testing.T) {
	if race.Enabled {
		t.Skip("allocation counts differ under the race detector")
	}
	ok := func(c *fiber.Ctx) error { return c.SendString("ok") }
	allocs := func(app *fiber.App) float64 {
		return testing.AllocsPerRun(100, serveOne(t, app, net.IPv4(192, 0, 2, 7)))
	}
	bare := fiber.New()
	bare.Get("/", ok)
	limited := fiber.New()
	limited.Get("/", fiberlimit.New(adaptertest.BenchLimiter(t)), ok)
	if b, l := allocs(bare), allocs(limited); l > b {
		t.Errorf("allowed request: %v allocations, bare route %v: want none more", l, b)
	}
}
