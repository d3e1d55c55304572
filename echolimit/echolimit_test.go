package echolimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/echolimit"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/keyfunc"
)

func serve(e *echo.Echo, path string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec
}

func TestNewPanicsOnNilLimiter(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("New(nil) did not panic")
		}
	}()
	echolimit.New(nil)
}

func ok(c echo.Context) error { return c.String(http.StatusOK, "ok") }

// TestDenyHandlerHTTPError checks the documented way to render denials
// with the app's HTTPErrorHandler: return an *echo.HTTPError.
func TestDenyHandlerHTTPError(t *testing.T) {
	e := echo.New()
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		var he *echo.HTTPError
		if errors.As(err, &he) {
			_ = c.JSON(he.Code, map[string]any{"error": he.Message})
		}
	}
	deny := echolimit.WithDenyHandler(func(c echo.Context, v *guard.Verdict) error {
		return echo.NewHTTPError(http.StatusTooManyRequests, "slow down")
	})
	e.GET("/", ok, echolimit.New(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("test", testkit.PerHour(1))), deny))
	serve(e, "/")
	rec := serve(e, "/")
	if rec.Code != http.StatusTooManyRequests || rec.Body.String() != "{\"error\":\"slow down\"}\n" {
		t.Errorf("denied: %d %q, want the app's error handler's 429", rec.Code, rec.Body)
	}
	if rec.Header().Get(guard.HeaderRetryAfter) != "3600" || rec.Header().Get(guard.HeaderRemaining) != "0" {
		t.Errorf("denied: headers %v, want Retry-After and X-RateLimit-* set before the error handler", rec.Header())
	}
}

// TestDefaultDenyBypassesErrorHandler checks that the default denial is
// written directly, so it is the same as every other adapter's.
func TestDefaultDenyBypassesErrorHandler(t *testing.T) {
	e := echo.New()
	called := false
	e.HTTPErrorHandler = func(err error, c echo.Context) { called = true }
	e.GET("/", ok, echolimit.New(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("test", testkit.PerHour(1)))))
	serve(e, "/")
	rec := serve(e, "/")
	if rec.Code != http.StatusTooManyRequests || called {
		t.Errorf("denied: status %d, error handler called %v; want 429 written directly", rec.Code, called)
	}
}

func TestSkipper(t *testing.T) {
	e := echo.New()
	skip := echolimit.WithSkipper(func(c echo.Context) bool { return c.QueryParam("internal") == "1" })
	e.GET("/", ok, echolimit.New(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("test", testkit.PerHour(1))), skip))
	for range 3 {
		if rec := serve(e, "/?internal=1"); rec.Code != http.StatusOK || rec.Header().Get(guard.HeaderLimit) != "" {
			t.Fatalf("skipped: %d %v, want 200 without rate-limit headers", rec.Code, rec.Header())
		}
	}
	if got := []int{serve(e, "/").Code, serve(e, "/").Code}; got[0] != 200 || got[1] != 429 {
		t.Errorf("not skipped: statuses %v, want [200 429]", got)
	}
}

type ctxKey struct{}

// TestContextLocalsAndRoute checks what key functions see: the request's
// context, c.Set values, and the route pattern c.Path().
func TestContextLocalsAndRoute(t *testing.T) {
	var (
		ctx   context.Context
		user  any
		route string
	)
	key := func(r keyfunc.Request) (string, error) {
		ctx, user, route = r.Context(), r.Value("user"), r.Route()
		return "k", nil
	}
	e := echo.New()
	setUser := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			c.Set("user", "alice")
			return next(c)
		}
	}
	e.GET("/users/:id", ok, setUser, echolimit.New(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("test", testkit.PerHour(5))), guard.WithKey(key)))
	req := httptest.NewRequestWithContext(context.WithValue(context.Background(), ctxKey{}, "request"), http.MethodGet, "/users/7", nil)
	e.ServeHTTP(httptest.NewRecorder(), req)
	if ctx == nil || ctx.Value(ctxKey{}) != "request" || user != "alice" || route != "/users/:id" {
		t.Errorf("key function saw context %v, user %v, route %q; want the request's context, alice, /users/:id", ctx, user, route)
	}
}

// TestCountIfCommittedError checks that a handler which wrote its answer
// and then returned an error is judged by what it wrote.
func TestCountIfCommittedError(t *testing.T) {
	e := echo.New()
	e.GET("/", func(c echo.Context) error {
		_ = c.String(http.StatusOK, "done")
		return echo.NewHTTPError(http.StatusInternalServerError)
	}, echolimit.New(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("test", testkit.PerHour(1))), guard.WithCountIf(func(s int) bool { return s >= 400 })))
	for i := range 3 {
		if rec := serve(e, "/"); rec.Code != http.StatusOK {
			t.Fatalf("request %d: status %d, want 200 (refunded: the client got 200)", i+1, rec.Code)
		}
	}
}

// errBadPassword is an app error that the app's error handler maps to 401.
type errBadPassword struct{}

func (errBadPassword) Error() string { return "bad password" }

// TestCountIfCustomErrorHandler: with count-if, a returned error is judged
// by the status the app's HTTPErrorHandler renders for it, and is
// rendered once: 10 wrong passwords against a limit of 3.
func TestCountIfCustomErrorHandler(t *testing.T) {
	tests := []struct {
		name    string
		handler echo.HandlerFunc
		want    int    // the status of the first 3
		body    string // and their body
		counted bool   // whether they count
	}{
		{"app error mapped to 401", func(echo.Context) error { return errBadPassword{} }, 401, "wrong password\n", true},
		{"wrapped app error mapped to 401", func(echo.Context) error { return fmt.Errorf("login: %w", errBadPassword{}) }, 401, "wrong password\n", true},
		{"other error left to echo's handler", func(echo.Context) error { return echo.NewHTTPError(http.StatusForbidden, "no") }, 403, "{\"message\":\"no\"}\n", true},
		{"error after a written success", func(c echo.Context) error {
			_ = c.String(http.StatusOK, "welcome\n")
			return errBadPassword{}
		}, 200, "welcome\n", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := echo.New()
			var calls int
			e.HTTPErrorHandler = func(err error, c echo.Context) {
				calls++
				if errors.As(err, new(errBadPassword)) {
					if !c.Response().Committed {
						_ = c.String(http.StatusUnauthorized, "wrong password\n")
					}
					return
				}
				e.DefaultHTTPErrorHandler(err, c)
			}
			e.POST("/login", tc.handler, echolimit.New(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("test", testkit.PerHour(3))), guard.WithCountIf(guard.StatusAuthFailure)))
			var got []int
			for i := range 10 {
				calls = 0
				rec := httptest.NewRecorder()
				e.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/login", nil))
				got = append(got, rec.Code)
				if rec.Code != http.StatusTooManyRequests {
					if rec.Body.String() != tc.body {
						t.Errorf("attempt %d: body %q, want %q once", i+1, rec.Body, tc.body)
					}
					if tc.want != http.StatusOK && calls != 1 {
						t.Errorf("attempt %d: error handler called %d times, want once", i+1, calls)
					}
				}
			}
			want := []int{tc.want, tc.want, tc.want}
			for range 7 {
				if tc.counted {
					want = append(want, http.StatusTooManyRequests)
				} else {
					want = append(want, tc.want)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("statuses %v, want %v", got, want)
			}
		})
	}
}
