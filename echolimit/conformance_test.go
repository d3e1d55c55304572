package echolimit_test

import (
	"io"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/echolimit"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/adaptertest"
)

// handler is the suite's handler; framework errors are returned as
// *echo.HTTPError for echo's error handler to write.
func handler(c echo.Context) error {
	body, _ := io.ReadAll(c.Request().Body)
	rep := adaptertest.ReplyTo(c.QueryParam, body)
	switch rep.Error {
	case adaptertest.FrameworkError:
		return echo.NewHTTPError(rep.Status, rep.Body)
	case adaptertest.PlainError:
		return adaptertest.ErrPlain
	}
	return c.String(rep.Status, rep.Body)
}

func newEcho(t *testing.T, l *core.Limiter, o adaptertest.Options) *echo.Echo {
	opts := o.GuardOptions()
	if o.DenyHandler {
		opts = append(opts, echolimit.WithDenyHandler(func(c echo.Context, v *guard.Verdict) error {
			status, body := adaptertest.DenyReply(v)
			return c.String(status, body)
		}))
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	mw := echolimit.New(l, opts...)
	e.GET(adaptertest.Path, handler, mw)
	e.POST(adaptertest.Path, handler, mw)
	return e
}

func newServer(t *testing.T, l *core.Limiter, o adaptertest.Options) string {
	srv := httptest.NewServer(newEcho(t, l, o))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestConformance(t *testing.T) { adaptertest.Run(t, newServer) }
