package ratekittest_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/gofiber/fiber/v2"
	"github.com/labstack/echo/v4"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/echolimit"
	"github.com/ratekit/ratekit/fiberlimit"
	"github.com/ratekit/ratekit/ginlimit"
	"github.com/ratekit/ratekit/grpclimit"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/nethttp"
	"github.com/ratekit/ratekit/ratekittest"
)

// gin writes its debug lines to standard output, where examples print.
func init() { gin.SetMode(gin.ReleaseMode) }

// exampleT stands in for a test's *testing.T in the examples: a failure
// ends the example with its message.
type exampleT struct{ testing.TB }

func (exampleT) Helper() {}

func (exampleT) Fatalf(format string, args ...any) { log.Fatalf(format, args...) }

// A policy's decisions, step by step on the kit's clock: the key used up,
// the exact wait, then admitted again once the clock has moved on. In a
// test, t is the test's *testing.T.
func ExampleNewLimiter() {
	var t testing.TB = exampleT{} // in a test: its *testing.T
	ctx := context.Background()
	sms, clock := ratekittest.NewLimiter(t, core.Policy{
		Name:  "sms",
		Rules: []core.Rule{{Limit: 1, Window: time.Minute}, {Limit: 3, Window: time.Hour}},
	})
	start := clock.Now()
	for _, advance := range []time.Duration{0, 30 * time.Second, 30 * time.Second, time.Minute, time.Minute} {
		clock.Advance(advance)
		d, _ := sms.Allow(ctx, "+8613800138000")
		fmt.Printf("+%v allowed=%v retry-after=%v\n", clock.Now().Sub(start), d.Allowed, d.RetryAfter)
	}
	// Output:
	// +0s allowed=true retry-after=0s
	// +30s allowed=false retry-after=30s
	// +1m0s allowed=true retry-after=0s
	// +2m0s allowed=true retry-after=0s
	// +3m0s allowed=false retry-after=57m0s
}

// newApp is an app that takes the store its limits count on: a Redis
// store in production, the kit's in its tests.
func newApp(store core.Store) http.Handler {
	mux := http.NewServeMux()
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "hello\n") })
	mux.Handle("GET /hello", nethttp.LimitByIP(3, time.Minute, guard.WithStore(store))(hello))
	return mux
}

// An app's test of its limits: the fourth request in a minute is refused
// with Retry-After: 60, and a minute later the client is served again. No
// sleep, no Redis.
func ExampleNewStore() {
	clock := ratekittest.NewClock()
	app := newApp(ratekittest.NewStore(clock))
	for _, advance := range []time.Duration{0, 0, 0, 0, 59 * time.Second, time.Second} {
		clock.Advance(advance)
		rec := httptest.NewRecorder()
		app.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/hello", nil))
		fmt.Printf("%d Retry-After=%q\n", rec.Code, rec.Header().Get("Retry-After"))
	}
	// Output:
	// 200 Retry-After=""
	// 200 Retry-After=""
	// 200 Retry-After=""
	// 429 Retry-After="60"
	// 429 Retry-After="1"
	// 200 Retry-After=""
}

// A daily quota in the customer's time zone, across midnight: Set the
// clock to the evening, use the day up, and move past midnight in Paris.
func ExampleClock_Set() {
	var t testing.TB = exampleT{} // in a test: its *testing.T
	ctx := context.Background()
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		log.Fatal(err)
	}
	quota, clock := ratekittest.NewLimiter(t, core.Policy{
		Name:  "reports",
		Rules: []core.Rule{{Limit: 2, Calendar: core.Day, Location: paris}},
	})
	clock.Set(time.Date(2029, time.March, 1, 23, 0, 0, 0, paris))
	for _, advance := range []time.Duration{0, 0, 0, time.Hour} {
		clock.Advance(advance)
		d, _ := quota.Allow(ctx, "customer-42")
		fmt.Printf("%s allowed=%v remaining=%d retry-after=%v\n", clock.Now().In(paris).Format("Jan 2 15:04"), d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	// Mar 1 23:00 allowed=true remaining=1 retry-after=0s
	// Mar 1 23:00 allowed=true remaining=0 retry-after=0s
	// Mar 1 23:00 allowed=false remaining=0 retry-after=1h0m0s
	// Mar 2 00:00 allowed=true remaining=1 retry-after=0s
}

// A net/http app's test: New with the kit's limiter, for a policy of the
// app's own (here failed logins, locked out for an hour).
func Example_nethttp() {
	var t testing.TB = exampleT{} // in a test: its *testing.T
	login, clock := ratekittest.NewLimiter(t, core.Policy{
		Name:    "login",
		Rules:   []core.Rule{{Limit: 2, Window: 15 * time.Minute}},
		Lockout: core.Lockout{For: time.Hour},
	})
	refuse := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusUnauthorized) })
	h := nethttp.New(login, guard.WithCountIf(guard.StatusAuthFailure))(refuse)
	for _, advance := range []time.Duration{0, 0, 0, 59 * time.Minute, time.Minute} {
		clock.Advance(advance)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/login", nil))
		fmt.Printf("%d Retry-After=%q\n", rec.Code, rec.Header().Get("Retry-After"))
	}
	// Output:
	// 401 Retry-After=""
	// 401 Retry-After=""
	// 429 Retry-After="3600"
	// 429 Retry-After="60"
	// 401 Retry-After=""
}

// A Gin app's test of a one-liner on the kit's store.
func Example_gin() {
	clock := ratekittest.NewClock()
	r := gin.New()
	r.Use(ginlimit.LimitByIP(2, time.Minute, guard.WithStore(ratekittest.NewStore(clock))))
	r.GET("/hello", func(c *gin.Context) { c.String(http.StatusOK, "hello\n") })
	for _, advance := range []time.Duration{0, 0, 0, time.Minute} {
		clock.Advance(advance)
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/hello", nil))
		fmt.Printf("%d Retry-After=%q\n", rec.Code, rec.Header().Get("Retry-After"))
	}
	// Output:
	// 200 Retry-After=""
	// 200 Retry-After=""
	// 429 Retry-After="60"
	// 200 Retry-After=""
}

// An Echo app's test of a one-liner on the kit's store.
func Example_echo() {
	clock := ratekittest.NewClock()
	e := echo.New()
	e.Use(echolimit.LimitByIP(2, time.Minute, guard.WithStore(ratekittest.NewStore(clock))))
	e.GET("/hello", func(c echo.Context) error { return c.String(http.StatusOK, "hello\n") })
	for _, advance := range []time.Duration{0, 0, 0, time.Minute} {
		clock.Advance(advance)
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/hello", nil))
		fmt.Printf("%d Retry-After=%q\n", rec.Code, rec.Header().Get("Retry-After"))
	}
	// Output:
	// 200 Retry-After=""
	// 200 Retry-After=""
	// 429 Retry-After="60"
	// 200 Retry-After=""
}

// A Fiber app's test of a one-liner on the kit's store.
func Example_fiber() {
	clock := ratekittest.NewClock()
	app := fiber.New()
	app.Use(fiberlimit.LimitByIP(2, time.Minute, guard.WithStore(ratekittest.NewStore(clock))))
	app.Get("/hello", func(c *fiber.Ctx) error { return c.SendString("hello\n") })
	for _, advance := range []time.Duration{0, 0, 0, time.Minute} {
		clock.Advance(advance)
		res, err := app.Test(httptest.NewRequest(fiber.MethodGet, "/hello", nil))
		if err != nil {
			log.Fatal(err)
		}
		_ = res.Body.Close()
		fmt.Printf("%d Retry-After=%q\n", res.StatusCode, res.Header.Get("Retry-After"))
	}
	// Output:
	// 200 Retry-After=""
	// 200 Retry-After=""
	// 429 Retry-After="60"
	// 200 Retry-After=""
}

// emptyService is the service of the gRPC example: grpc-go's test service,
// whose EmptyCall answers at once. (The interceptors leave the health
// service unlimited.)
type emptyService struct {
	testpb.UnimplementedTestServiceServer
}

func (emptyService) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	return &testpb.Empty{}, nil
}

// A gRPC server's test of a one-liner on the kit's store, over loopback:
// the third call in a minute is ResourceExhausted with a RetryInfo of a
// minute, and a minute later the call is served again.
func Example_grpc() {
	clock := ratekittest.NewClock()
	lim := grpclimit.LimitByIP(2, time.Minute, guard.WithStore(ratekittest.NewStore(clock)))
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(lim.UnaryServerInterceptor()))
	testpb.RegisterTestServiceServer(srv, emptyService{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()
	client := testpb.NewTestServiceClient(cc)
	for _, advance := range []time.Duration{0, 0, 0, time.Minute} {
		clock.Advance(advance)
		_, err := client.EmptyCall(context.Background(), &testpb.Empty{})
		var retry time.Duration
		for _, d := range status.Convert(err).Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				retry = ri.GetRetryDelay().AsDuration()
			}
		}
		fmt.Printf("%v retry=%v\n", status.Code(err), retry)
	}
	// Output:
	// OK retry=0s
	// OK retry=0s
	// ResourceExhausted retry=1m0s
	// OK retry=0s
}
