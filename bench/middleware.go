package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/didip/tollbooth/v7"
	"github.com/gin-gonic/gin"
	"github.com/go-chi/httprate"
	"github.com/gofiber/fiber/v2"
	"github.com/labstack/echo/v4"
	ulule "github.com/ulule/limiter/v3"
	"github.com/ulule/limiter/v3/drivers/middleware/stdlib"
	ulmemory "github.com/ulule/limiter/v3/drivers/store/memory"
	"github.com/valyala/fasthttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/echolimit"
	"github.com/ratekit/ratekit/fiberlimit"
	"github.com/ratekit/ratekit/ginlimit"
	"github.com/ratekit/ratekit/grpclimit"
	"github.com/ratekit/ratekit/nethttp"
)

// Middleware cost: a trivial handler served bare and behind a limiter on
// the allowed path (in-memory store, the limit of the hot pattern, never
// reached; one client address, so one key), each with
// testing.Benchmark in this process. The overhead is the difference.

// mwCase is one middleware to measure: how to serve one request bare and
// through the middleware. Each function returns the status served.
type mwCase struct {
	name      string // the middleware, as printed
	framework string // what it plugs into
	ratekit   bool
	build     func() (bare, wrapped func() int, err error)
}

// mwResult is the measured cost of one mwCase: the lower of two rounds
// of each side, so that a burst of load on the machine during one of them
// does not count.
type mwResult struct {
	name, framework    string
	ratekit            bool
	bareNs, wrappedNs  float64
	bareAllocs, allocs int64 // per request, bare and wrapped
	bareBytes, bytes   int64
	failed             string // why the case was not measured, or a non-200 answer
}

// overheadNs returns the middleware's time per request over the bare
// handler.
func (m mwResult) overheadNs() float64 { return m.wrappedNs - m.bareNs }

// overheadAllocs returns the middleware's allocations per request over
// the bare handler.
func (m mwResult) overheadAllocs() int64 { return m.allocs - m.bareAllocs }

// overheadBytes returns the middleware's heap bytes per request over the
// bare handler.
func (m mwResult) overheadBytes() int64 { return m.bytes - m.bareBytes }

// Middleware names, as the goals look them up.
const (
	mwNethttp   = "ratekit nethttp"
	mwGin       = "ratekit ginlimit"
	mwEcho      = "ratekit echolimit"
	mwFiber     = "ratekit fiberlimit"
	mwGRPC      = "ratekit grpclimit (unary interceptor)"
	mwUlule     = "ulule/limiter stdlib"
	mwHTTPRate  = "go-chi/httprate"
	mwTollbooth = "didip/tollbooth v7"
)

// cheapWriter is a reusable http.ResponseWriter that does almost nothing,
// so that the writer's own cost does not drown the middleware's:
// httptest.ResponseRecorder allocates a recorder, a header map and a body
// buffer per request.
type cheapWriter struct {
	h    http.Header
	code int
	n    int
}

func newCheapWriter() *cheapWriter { return &cheapWriter{h: make(http.Header)} }

func (w *cheapWriter) Header() http.Header { return w.h }

func (w *cheapWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

func (w *cheapWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	w.n += len(b)
	return len(b), nil
}

// reset readies w for the next request, keeping the header map's storage.
func (w *cheapWriter) reset() {
	clear(w.h)
	w.code, w.n = 0, 0
}

// serveWith returns a function serving req to h on one reused writer.
func serveWith(h http.Handler, req *http.Request) func() int {
	w := newCheapWriter()
	return func() int {
		w.reset()
		h.ServeHTTP(w, req)
		return w.code
	}
}

// mwLimiter is ratekit's limiter for the middleware cases: default
// options, an in-memory store, the hot pattern's limit.
func mwLimiter() (*core.Limiter, error) {
	return core.NewLimiter(core.NewMemoryStore(), core.Policy{Name: "mw",
		Rules: []core.Rule{{Limit: roomy, Window: roomyMemWindow}}})
}

// mwRequest is the request every HTTP case serves: GET / from 192.0.2.1.
func mwRequest() *http.Request {
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.RemoteAddr = "192.0.2.1:1234"
	return req
}

var okBody = []byte("ok")

func okHandler(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(okBody) }

// netHTTPCase is a net/http middleware around okHandler.
func netHTTPCase(name string, ratekit bool, mw func() (func(http.Handler) http.Handler, error)) mwCase {
	return mwCase{name: name, framework: "net/http", ratekit: ratekit, build: func() (func() int, func() int, error) {
		m, err := mw()
		if err != nil {
			return nil, nil, err
		}
		req := mwRequest()
		return serveWith(http.HandlerFunc(okHandler), req), serveWith(m(http.HandlerFunc(okHandler)), req), nil
	}}
}

func middlewareCases() []mwCase {
	return []mwCase{
		netHTTPCase(mwNethttp, true, func() (func(http.Handler) http.Handler, error) {
			l, err := mwLimiter()
			if err != nil {
				return nil, err
			}
			return nethttp.New(l), nil
		}),
		{name: mwGin, framework: "gin", ratekit: true, build: buildGin},
		{name: mwEcho, framework: "echo", ratekit: true, build: buildEcho},
		{name: mwFiber, framework: "fiber", ratekit: true, build: buildFiber},
		{name: mwGRPC, framework: "gRPC", ratekit: true, build: buildGRPC},
		netHTTPCase(mwUlule, false, func() (func(http.Handler) http.Handler, error) {
			l := ulule.New(ulmemory.NewStore(), ulule.Rate{Period: roomyMemWindow, Limit: roomy})
			return stdlib.NewMiddleware(l).Handler, nil
		}),
		netHTTPCase(mwHTTPRate, false, func() (func(http.Handler) http.Handler, error) {
			// The key of httprate's deprecated KeyByIP, written out: the
			// peer address, IPv6 by /64.
			byPeer := func(r *http.Request) (string, error) {
				ip, _, err := net.SplitHostPort(r.RemoteAddr)
				if err != nil {
					ip = r.RemoteAddr
				}
				return httprate.CanonicalizeIP(ip), nil
			}
			return httprate.LimitBy(roomy, roomyMemWindow, byPeer), nil
		}),
		netHTTPCase(mwTollbooth, false, func() (func(http.Handler) http.Handler, error) {
			// A token bucket of the same rate, the burst the limit.
			lmt := tollbooth.NewLimiter(roomy/roomyMemWindow.Seconds(), nil)
			lmt.SetBurst(roomy)
			return func(h http.Handler) http.Handler { return tollbooth.LimitHandler(lmt, h) }, nil
		}),
	}
}

func buildGin() (func() int, func() int, error) {
	gin.SetMode(gin.ReleaseMode)
	l, err := mwLimiter()
	if err != nil {
		return nil, nil, err
	}
	ok := func(c *gin.Context) { c.Data(http.StatusOK, "", okBody) }
	bare := gin.New()
	bare.GET("/", ok)
	wrapped := gin.New()
	wrapped.GET("/", ginlimit.New(l), ok)
	req := mwRequest()
	return serveWith(bare, req), serveWith(wrapped, req), nil
}

func buildEcho() (func() int, func() int, error) {
	l, err := mwLimiter()
	if err != nil {
		return nil, nil, err
	}
	ok := func(c echo.Context) error { return c.Blob(http.StatusOK, "", okBody) }
	bare := echo.New()
	bare.GET("/", ok)
	wrapped := echo.New()
	wrapped.GET("/", ok, echolimit.New(l))
	req := mwRequest()
	return serveWith(bare, req), serveWith(wrapped, req), nil
}

// buildFiber serves through app.Handler() on one reused fasthttp
// request context, as fiber's own benchmarks do.
func buildFiber() (func() int, func() int, error) {
	l, err := mwLimiter()
	if err != nil {
		return nil, nil, err
	}
	ok := func(c *fiber.Ctx) error { return c.Send(okBody) }
	serve := func(app *fiber.App) func() int {
		h := app.Handler()
		var req fasthttp.Request
		req.Header.SetMethod(fiber.MethodGet)
		req.SetRequestURI("/")
		var ctx fasthttp.RequestCtx
		ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1234}, nil)
		return func() int {
			ctx.Response.Reset()
			h(&ctx)
			return ctx.Response.StatusCode()
		}
	}
	cfg := fiber.Config{DisableStartupMessage: true}
	bare := fiber.New(cfg)
	bare.Get("/", ok)
	wrapped := fiber.New(cfg)
	wrapped.Get("/", fiberlimit.New(l), ok)
	return serve(bare), serve(wrapped), nil
}

// benchStream stands in for the server transport stream, so that
// grpc.SetHeader works as it does in a server.
type benchStream struct{}

const grpcMethod = "/bench.v1.Bench/Call"

func (benchStream) Method() string               { return grpcMethod }
func (benchStream) SetHeader(metadata.MD) error  { return nil }
func (benchStream) SendHeader(metadata.MD) error { return nil }
func (benchStream) SetTrailer(metadata.MD) error { return nil }

// buildGRPC calls a trivial unary handler bare and through
// grpclimit.UnaryServerInterceptor, with the context a server gives a
// handler: incoming metadata, the peer, the transport stream.
func buildGRPC() (func() int, func() int, error) {
	l, err := mwLimiter()
	if err != nil {
		return nil, nil, err
	}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("user-agent", "bench"))
	ctx = peer.NewContext(ctx, &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 50000}})
	ctx = grpc.NewContextWithServerTransportStream(ctx, benchStream{})
	info := &grpc.UnaryServerInfo{FullMethod: grpcMethod}
	req := &struct{}{}
	handler := func(_ context.Context, req any) (any, error) { return req, nil }
	icpt := grpclimit.UnaryServerInterceptor(l)
	status := func(err error) int {
		if err != nil {
			return http.StatusTooManyRequests
		}
		return http.StatusOK
	}
	bare := func() int { _, err := handler(ctx, req); return status(err) }
	wrapped := func() int { _, err := icpt(ctx, req, info, handler); return status(err) }
	return bare, wrapped, nil
}

// benchServe measures serve with testing.Benchmark; bad counts answers
// other than 200.
func benchServe(serve func() int, bad *int) testing.BenchmarkResult {
	return testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if serve() != http.StatusOK {
				*bad++
			}
		}
	})
}

// runMiddleware measures every case, bare and wrapped alternately, twice
// (test.benchtime must be set).
func runMiddleware(ctx context.Context, out io.Writer) []mwResult {
	var res []mwResult
	for _, c := range middlewareCases() {
		if ctx.Err() != nil {
			break
		}
		m := mwResult{name: c.name, framework: c.framework, ratekit: c.ratekit,
			bareNs: math.Inf(1), wrappedNs: math.Inf(1), bareAllocs: math.MaxInt64, allocs: math.MaxInt64,
			bareBytes: math.MaxInt64, bytes: math.MaxInt64}
		bare, wrapped, err := c.build()
		if err != nil {
			m.failed = err.Error()
			res = append(res, m)
			continue
		}
		bad := 0
		for range 2 {
			for i, serve := range []func() int{bare, wrapped} {
				br := benchServe(serve, &bad)
				ns := nsPerOp(br)
				if i == 0 {
					m.bareNs, m.bareAllocs, m.bareBytes = math.Min(m.bareNs, ns), min(m.bareAllocs, br.AllocsPerOp()), min(m.bareBytes, br.AllocedBytesPerOp())
				} else {
					m.wrappedNs, m.allocs, m.bytes = math.Min(m.wrappedNs, ns), min(m.allocs, br.AllocsPerOp()), min(m.bytes, br.AllocedBytesPerOp())
				}
			}
		}
		if bad > 0 {
			m.failed = fmt.Sprintf("%d answers were not 200: the limit was reached", bad)
		}
		res = append(res, m)
		fmt.Fprintf(out, "middleware %-38s bare %7.1f ns %2d allocs, wrapped %7.1f ns %2d allocs: +%.1f ns +%d allocs %s\n",
			m.name, m.bareNs, m.bareAllocs, m.wrappedNs, m.allocs, m.overheadNs(), m.overheadAllocs(), m.failed)
	}
	return res
}

// nsPerOp returns the ns per iteration of a testing.Benchmark result.
func nsPerOp(br testing.BenchmarkResult) float64 {
	if br.N <= 0 {
		return math.NaN()
	}
	return float64(br.T.Nanoseconds()) / float64(br.N)
}
