package echolimit_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/echolimit"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/test/adaptertest"
)

// handler is the suite's handler; framework errors are returned as
// *echo.HTTPError for echo's error handler to write.
func handler(c echo.Context) error {
	body, _ := io.ReadAll(c.Request().Body)
	rep := adaptertest.ReplyTo(c.QueryParam, body)
	if rep.Panic != nil {
		panic(rep.Panic)
	}
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
	if o.ChallengeHandler {
		opts = append(opts, echolimit.WithChallengeHandler(func(c echo.Context, v *guard.Verdict) error {
			status, body := adaptertest.ChallengeReply(v)
			return c.String(status, body)
		}))
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.Use(recoverPanics)
	mws := []echo.MiddlewareFunc{echolimit.New(l, opts...)}
	if o.Outer != nil {
		// The first middleware of a route is the outermost.
		mws = append([]echo.MiddlewareFunc{echolimit.New(o.Outer.Limiter, o.Outer.Options.GuardOptions()...)}, mws...)
	}
	if o.AnyMethod {
		e.Any(adaptertest.Path, handler, mws...)
	} else {
		e.GET(adaptertest.Path, handler, mws...)
		e.POST(adaptertest.Path, handler, mws...)
	}
	return e
}

// recoverPanics is echo's middleware.Recover in short (that package needs
// golang.org/x/time): a panic is a 500 from the error handler, and
// http.ErrAbortHandler goes on to abort the response.
func recoverPanics(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler { //nolint:errorlint // the sentinel itself is the panic value
					panic(p)
				}
				err = echo.ErrInternalServerError
			}
		}()
		return next(c)
	}
}

func newServer(t *testing.T, l *core.Limiter, o adaptertest.Options) string {
	var h http.Handler = newEcho(t, l, o)
	if o.Decompress {
		h = adaptertest.Gunzip(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestConformance(t *testing.T) { adaptertest.Run(t, newServer) }

func TestOneLiners(t *testing.T) {
	adaptertest.RunOneLiners(t, adaptertest.OneLiners[echo.MiddlewareFunc]{
		LimitByIP:     echolimit.LimitByIP,
		LimitByAppKey: echolimit.LimitByAppKey,
		LimitByUser:   echolimit.LimitByUser,
		UseStore:      echolimit.UseStore,
	}, func(t *testing.T, limit echo.MiddlewareFunc) adaptertest.Call {
		auth := func(next echo.HandlerFunc) echo.HandlerFunc {
			return func(c echo.Context) error {
				if u := c.Request().Header.Get(adaptertest.UserHeader); u != "" {
					c.Set(adaptertest.UserKey, u)
				}
				return next(c)
			}
		}
		e := echo.New()
		e.HideBanner, e.HidePort = true, true
		e.GET(adaptertest.Path, handler, auth, limit)
		ts := httptest.NewServer(e)
		t.Cleanup(ts.Close)
		return adaptertest.HTTPCall(t, ts.URL)
	})
}
