package ginlimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/ginlimit"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/keyfunc"
)

func TestNewPanicsOnNilLimiter(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("New(nil) did not panic")
		}
	}()
	ginlimit.New(nil)
}

type ctxKey struct{}
type localKey struct{}

// TestContextAndLocals checks the gin trap: key functions and observers get
// c.Request.Context() (cancellable, carrying the request's values), never
// the *gin.Context, and Value finds c.Set values under string and typed
// keys.
func TestContextAndLocals(t *testing.T) {
	var (
		keyCtx, obsCtx context.Context
		user, typed    any
	)
	key := func(r keyfunc.Request) (string, error) {
		keyCtx = r.Context()
		user, typed = r.Value("user"), r.Value(localKey{})
		return "k", nil
	}
	obs := core.ObserverFunc(func(ctx context.Context, _ core.Event) { obsCtx = ctx })
	r := gin.New()
	r.GET("/", func(c *gin.Context) {
		c.Set("user", "alice")
		c.Set(localKey{}, "typed")
	}, ginlimit.New(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("test", testkit.PerHour(5)), core.WithObserver(obs)), guard.WithKey(key)), func(c *gin.Context) {
		c.Status(http.StatusNoContent)
	})

	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "request"))
	defer cancel()
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil))

	if rec.Code != http.StatusNoContent {
		t.Fatalf("status %d, want 204", rec.Code)
	}
	for name, c := range map[string]context.Context{"key function": keyCtx, "observer": obsCtx} {
		if c == nil || c.Done() == nil || c.Value(ctxKey{}) != "request" {
			t.Errorf("%s context %v: want the request's context", name, c)
		}
		if _, isGin := c.(*gin.Context); isGin {
			t.Errorf("%s got the *gin.Context", name)
		}
	}
	if user != "alice" || typed != "typed" {
		t.Errorf("Value(\"user\"), Value(localKey{}) = %v, %v; want alice, typed", user, typed)
	}
}

// TestDenyAbortsChain checks that a denial stops the chain even when the
// deny handler does not abort, and that handlers after it never run.
func TestDenyAbortsChain(t *testing.T) {
	ran := 0
	r := gin.New()
	deny := ginlimit.WithDenyHandler(func(c *gin.Context, v *guard.Verdict) {
		c.String(http.StatusTooManyRequests, "later")
	})
	r.GET("/", ginlimit.New(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("test", testkit.PerHour(1))), deny), func(c *gin.Context) { ran++ })
	for range 3 {
		r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	}
	if ran != 1 {
		t.Errorf("handler ran %d times, want 1", ran)
	}
}

// TestRouteIsFullPath checks that key functions see the gin route
// pattern, so keyfunc.Route keys per route, not per path.
func TestRouteIsFullPath(t *testing.T) {
	r := gin.New()
	r.GET("/users/:id", ginlimit.New(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("test", testkit.PerHour(1))), guard.WithKey(keyfunc.Route())), func(c *gin.Context) {})
	var got []int
	for _, p := range []string{"/users/1", "/users/2"} {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p, nil))
		got = append(got, rec.Code)
	}
	if got[0] != 200 || got[1] != 429 {
		t.Errorf("statuses %v, want [200 429]: one bucket for the route /users/:id", got)
	}
}

// TestCountIfErrorMiddleware checks the documented order: an
// error-rendering middleware registered after the limiter writes the
// status before the limiter reads it.
func TestCountIfErrorMiddleware(t *testing.T) {
	renderErrors := func(c *gin.Context) {
		c.Next()
		if len(c.Errors) > 0 && !c.Writer.Written() {
			c.String(http.StatusUnauthorized, "denied")
		}
	}
	r := gin.New()
	mw := ginlimit.New(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("test", testkit.PerHour(1))), guard.WithCountIf(func(s int) bool { return s == http.StatusUnauthorized }))
	r.POST("/login", mw, renderErrors, func(c *gin.Context) { _ = c.Error(errors.New("bad password")) })
	var got []int
	for range 2 {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/login", nil))
		got = append(got, rec.Code)
	}
	if got[0] != 401 || got[1] != 429 {
		t.Errorf("statuses %v, want [401 429]: the rendered 401 counts", got)
	}
}
