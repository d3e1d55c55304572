package echolimit_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/echolimit"
	"github.com/ratekit/ratekit/internal/race"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// TestWrapKeepsHandlers checks that the handler the middleware builds for
// a next is kept (echo applies route middleware on every request), and
// that every handler, kept or not, runs its own next: many nexts share the
// few slots, and some are built anew for every request.
func TestWrapKeepsHandlers(t *testing.T) {
	mw := echolimit.New(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("test", testkit.PerHour(10_000))))
	e := echo.New()
	call := func(h echo.HandlerFunc) string {
		t.Helper()
		rec := httptest.NewRecorder()
		if err := h(e.NewContext(httptest.NewRequest(http.MethodGet, "/", nil), rec)); err != nil {
			t.Fatal(err)
		}
		if rec.Header().Get("X-RateLimit-Limit") != "10000" {
			t.Fatalf("no rate-limit headers: %v", rec.Header())
		}
		return rec.Body.String()
	}
	next := func(i int) echo.HandlerFunc {
		return func(c echo.Context) error { return c.String(http.StatusOK, strconv.Itoa(i)) }
	}
	nexts := make([]echo.HandlerFunc, 100)
	for i := range nexts {
		nexts[i] = next(i)
	}
	for round := range 3 {
		for i, n := range nexts {
			if got, want := call(mw(n)), strconv.Itoa(i); got != want {
				t.Fatalf("round %d: the handler for next %d ran %q", round, i, got)
			}
			// A next built for this request only.
			if got, want := call(mw(next(-i))), strconv.Itoa(-i); got != want {
				t.Fatalf("round %d: the handler for a fresh next %d ran %q", round, -i, got)
			}
		}
	}
	if race.Enabled {
		return // the race detector changes allocation counts
	}
	// A middleware of its own, whose slots are all free.
	mw = echolimit.New(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("test", testkit.PerHour(1))))
	ok := nexts[0]
	if n := testing.AllocsPerRun(100, func() { mw(ok) }); n != 0 {
		t.Errorf("wrapping the same next again allocates %v times, want 0", n)
	}
}
