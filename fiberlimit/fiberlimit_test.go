package fiberlimit_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/fiberlimit"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/keyfunc"
)

func test(t *testing.T, app *fiber.App, req *http.Request) (int, http.Header, string) {
	t.Helper()
	res, err := app.Test(req, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, string(b)
}

// client returns a client whose idle connections are closed before the
// server started earlier in the test stops.
func client(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func ok(c *fiber.Ctx) error { return c.SendString("ok") }

func TestNewPanicsOnNilLimiter(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("New(nil) did not panic")
		}
	}()
	fiberlimit.New(nil)
}

func TestNext(t *testing.T) {
	app := fiber.New()
	next := fiberlimit.WithNext(func(c *fiber.Ctx) bool { return c.Query("internal") == "1" })
	app.Get("/", fiberlimit.New(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("test", testkit.PerHour(1))), next), ok)
	for range 3 {
		if s, h, _ := test(t, app, httptest.NewRequest(http.MethodGet, "/?internal=1", nil)); s != 200 || h.Get(guard.HeaderLimit) != "" {
			t.Fatalf("skipped: %d %v, want 200 without rate-limit headers", s, h)
		}
	}
	s1, _, _ := test(t, app, httptest.NewRequest(http.MethodGet, "/", nil))
	s2, _, _ := test(t, app, httptest.NewRequest(http.MethodGet, "/", nil))
	if s1 != 200 || s2 != 429 {
		t.Errorf("not skipped: statuses %d %d, want 200 429", s1, s2)
	}
}

// TestDenyHandlerError checks that a deny handler's *fiber.Error goes to
// the app's ErrorHandler, with the rate-limit headers already set.
func TestDenyHandlerError(t *testing.T) {
	app := fiber.New(fiber.Config{ErrorHandler: func(c *fiber.Ctx, err error) error {
		var fe *fiber.Error
		if !errors.As(err, &fe) {
			return err
		}
		return c.Status(fe.Code).JSON(fiber.Map{"error": fe.Message})
	}})
	deny := fiberlimit.WithDenyHandler(func(c *fiber.Ctx, v *guard.Verdict) error {
		return fiber.NewError(fiber.StatusTooManyRequests, "slow down")
	})
	app.Get("/", fiberlimit.New(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("test", testkit.PerHour(1))), deny), ok)
	test(t, app, httptest.NewRequest(http.MethodGet, "/", nil))
	s, h, body := test(t, app, httptest.NewRequest(http.MethodGet, "/", nil))
	if s != 429 || body != `{"error":"slow down"}` || h.Get(guard.HeaderRetryAfter) != "3600" {
		t.Errorf("denied: %d %v %q, want the error handler's 429 with Retry-After", s, h, body)
	}
}

type ctxKey struct{}

// TestLocalsAndUserContext checks Value (c.Locals, then UserContext) and
// that the context is c.UserContext().
func TestLocalsAndUserContext(t *testing.T) {
	var ctx context.Context
	var local, fromCtx any
	key := func(r keyfunc.Request) (string, error) {
		ctx, local, fromCtx = r.Context(), r.Value("user"), r.Value(ctxKey{})
		return "k", nil
	}
	app := fiber.New()
	app.Use(func(c *fiber.Ctx) error {
		c.Locals("user", "alice")
		c.SetUserContext(context.WithValue(context.Background(), ctxKey{}, "request"))
		return c.Next()
	})
	app.Get("/", fiberlimit.New(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("test", testkit.PerHour(5))), guard.WithKey(key)), ok)
	test(t, app, httptest.NewRequest(http.MethodGet, "/", nil))
	if local != "alice" || fromCtx != "request" || ctx == nil || ctx.Value(ctxKey{}) != "request" {
		t.Errorf("Value: local %v, context %v; context %v; want alice, request and the user context", local, fromCtx, ctx)
	}
}

// TestPeerNotProxyHeader checks that the default key is the TCP peer even
// when fiber is configured to trust a proxy header from anyone.
func TestPeerNotProxyHeader(t *testing.T) {
	app := fiber.New(fiber.Config{ProxyHeader: fiber.HeaderXForwardedFor, DisableStartupMessage: true})
	app.Get("/", fiberlimit.New(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("test", testkit.PerHour(1)))), ok)
	base := serve(t, app)
	hc := client(t)
	var got []int
	for _, xff := range []string{"203.0.113.1", "203.0.113.2"} {
		req, _ := http.NewRequest(http.MethodGet, base+"/", nil)
		req.Header.Set("X-Forwarded-For", xff)
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		got = append(got, res.StatusCode)
	}
	if got[0] != 200 || got[1] != 429 {
		t.Errorf("statuses %v, want [200 429]: a spoofed X-Forwarded-For must not pick the key", got)
	}
}

// TestRequestViewCopies checks that what key functions read survives the
// request: fasthttp reuses its buffers for the next request on the
// connection, so zero-copy strings kept in a store would change under it.
func TestRequestViewCopies(t *testing.T) {
	type seen struct{ header, value, query, path, route, method, body string }
	var (
		mu   sync.Mutex
		kept []seen
	)
	key := func(r keyfunc.Request) (string, error) {
		b, err := r.Body(1 << 10)
		if err != nil {
			return "", err
		}
		s := seen{r.Header("X-User"), strings.Join(r.Values("X-User"), ","), r.Query("q"), r.Path(), r.Route(), r.Method(), string(b)}
		mu.Lock()
		kept = append(kept, s)
		mu.Unlock()
		return s.header, nil
	}
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.All("/items/:id", fiberlimit.New(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("test", testkit.PerHour(100))), guard.WithKey(key)), ok)
	base := serve(t, app)
	hc := client(t)

	const n = 20
	var want []seen
	for i := range n {
		method := [...]string{http.MethodGet, http.MethodPost, http.MethodPut}[i%3]
		v := fmt.Sprintf("user-%02d-%s", i, strings.Repeat("x", i))
		body := fmt.Sprintf("body-%02d", i)
		req, _ := http.NewRequest(method, fmt.Sprintf("%s/items/%d?q=%s", base, i, v), strings.NewReader(body))
		req.Header.Set("X-User", v)
		res, err := hc.Do(req) // one keep-alive connection
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		want = append(want, seen{v, v, v, fmt.Sprintf("/items/%d", i), "/items/:id", method, body})
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range want {
		if i >= len(kept) || kept[i] != want[i] {
			t.Fatalf("request %d: key function kept %+v, want %+v", i, kept[min(i, len(kept)-1)], want[i])
		}
	}
}

// errBadPassword is an app error that the app's ErrorHandler maps to 401.
type errBadPassword struct{}

func (errBadPassword) Error() string { return "bad password" }

// TestCountIfCustomErrorHandler: with count-if, a returned error is judged
// by the status the app's ErrorHandler renders for it, and is rendered
// once: 10 wrong passwords against a limit of 3.
func TestCountIfCustomErrorHandler(t *testing.T) {
	var calls int
	mapErrors := func(c *fiber.Ctx, err error) error {
		calls++
		if errors.As(err, new(errBadPassword)) {
			return c.Status(fiber.StatusUnauthorized).SendString("wrong password\n")
		}
		return fiber.DefaultErrorHandler(c, err)
	}
	tests := []struct {
		name    string
		mount   bool // the route lives in a mounted app with the ErrorHandler
		handler fiber.Handler
		want    int
		body    string
		counted bool
	}{
		{"app error mapped to 401", false, func(*fiber.Ctx) error { return errBadPassword{} }, 401, "wrong password\n", true},
		{"wrapped app error mapped to 401", false, func(*fiber.Ctx) error { return fmt.Errorf("login: %w", errBadPassword{}) }, 401, "wrong password\n", true},
		{"mounted app's ErrorHandler", true, func(*fiber.Ctx) error { return errBadPassword{} }, 401, "wrong password\n", true},
		{"other error left to the default", false, func(*fiber.Ctx) error { return fiber.NewError(fiber.StatusForbidden, "no") }, 403, "no", true},
		{"ErrorHandler failing is a 500", false, func(*fiber.Ctx) error { return errors.New("boom") }, 500, "Internal Server Error", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			errorHandler := mapErrors
			if tc.want == 500 {
				errorHandler = func(*fiber.Ctx, error) error { calls++; return errors.New("error handler failed") }
			}
			mw := fiberlimit.New(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("test", testkit.PerHour(3))), guard.WithKey(func(keyfunc.Request) (string, error) { return "k", nil }),
				guard.WithCountIf(guard.StatusAuthFailure))
			app := fiber.New(fiber.Config{ErrorHandler: errorHandler})
			path := "/login"
			if tc.mount {
				app = fiber.New()
				sub := fiber.New(fiber.Config{ErrorHandler: errorHandler})
				sub.Post("/login", mw, tc.handler)
				app.Mount("/api", sub)
				path = "/api/login"
			} else {
				app.Post(path, mw, tc.handler)
			}
			var got []int
			for i := range 10 {
				calls = 0
				s, _, body := test(t, app, httptest.NewRequest(http.MethodPost, path, nil))
				got = append(got, s)
				if s != fiber.StatusTooManyRequests && (body != tc.body || calls != 1) {
					t.Errorf("attempt %d: body %q, error handler called %d times; want %q, rendered once", i+1, body, calls, tc.body)
				}
			}
			want := []int{tc.want, tc.want, tc.want}
			for range 7 {
				if tc.counted {
					want = append(want, fiber.StatusTooManyRequests)
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

// TestBodyAsHandlerSeesIt: key functions read the body as the handler's
// c.Body() gives it, for every Content-Encoding fiber decodes, with the
// decoding bounded by the key function's limit.
func TestBodyAsHandlerSeesIt(t *testing.T) {
	const text = `{"phone":"13800138000"}`
	gz := func(b []byte) []byte { return fasthttp.AppendGzipBytes(nil, b) }
	br := func(b []byte) []byte { return fasthttp.AppendBrotliBytes(nil, b) }
	zl := func(b []byte) []byte { return fasthttp.AppendDeflateBytes(nil, b) }
	plain := []byte(text)
	big := bytes.Repeat([]byte(" "), 4<<20)
	tests := []struct {
		name     string
		encoding []string // Content-Encoding fields, in order
		body     []byte
		status   int    // 200: the key function saw what the handler sees
		want     string // what both see, when 200
	}{
		{"no encoding", nil, plain, 200, text},
		{"gzip", []string{"gzip"}, gz(plain), 200, text},
		{"deflate", []string{"deflate"}, zl(plain), 200, text},
		{"br", []string{"br"}, br(plain), 200, text},
		{"brotli", []string{"brotli"}, br(plain), 200, text},
		{"gzip, br: decoded in the order listed, as fiber does", []string{"gzip, br"}, gz(br(plain)), 200, text},
		{"unknown coding alone: as sent", []string{"identity"}, plain, 200, text},
		{"upper case is unknown", []string{"GZIP"}, gz(plain), 200, string(gz(plain))},
		{"unknown coding first of two: no body", []string{"identity, gzip"}, gz(plain), 200, ""},
		{"unknown coding after gzip: stops there", []string{"gzip, x-custom"}, gz(plain), 200, text},
		{"the last field counts", []string{"br", "gzip"}, gz(plain), 200, text},
		// fiber hands the handler the decoder's error text ("EOF"); an
		// absent body has no key to read.
		{"empty body", []string{"gzip"}, nil, 200, ""},
		{"too large once decoded", []string{"gzip"}, gz(big), 413, ""},
		{"too large at the first of two steps", []string{"gzip, gzip"}, gz(gz(big)), 413, ""},
		{"too large brotli", []string{"br"}, br(big), 413, ""},
		{"too large deflate", []string{"deflate"}, zl(big), 413, ""},
		{"too large without encoding", nil, big[:2<<10], 413, ""},
		{"corrupt gzip", []string{"gzip"}, []byte("not gzip at all"), 400, ""},
		{"overlong Content-Encoding field", []string{strings.Repeat("identity, ", 30) + "gzip"}, gz(plain), 400, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var keySaw, handlerSaw string
			key := func(r keyfunc.Request) (string, error) {
				b, err := r.Body(1 << 10)
				keySaw = string(b)
				return "k", err
			}
			app := fiber.New()
			app.Post("/", fiberlimit.New(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("test", testkit.PerHour(100))), guard.WithKey(key)), func(c *fiber.Ctx) error {
				handlerSaw = string(c.Body())
				return c.SendString("ok")
			})
			req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(tc.body))
			for _, e := range tc.encoding {
				req.Header.Add("Content-Encoding", e)
			}
			s, _, body := test(t, app, req)
			if s != tc.status {
				t.Fatalf("status %d %q, want %d", s, body, tc.status)
			}
			if s != 200 {
				return
			}
			if tc.body == nil {
				handlerSaw = "" // the handler's "EOF" is fiber's, not a body
			}
			if keySaw != tc.want || handlerSaw != tc.want {
				t.Errorf("key function saw %q, handler %q; want %q", keySaw, handlerSaw, tc.want)
			}
		})
	}
}
