// Package outboundtest is the conformance suite of the adapters that
// throttle what an app sends: nethttp.Transport and grpclimit's unary and
// stream client interceptors. [Run] runs one set of cases, over a real
// loopback connection, against the adapter a [Harness] builds: a request
// waits until it fits, by the default key, across a fleet of instances
// on every backend; every limit holds when the request leaves
// (guard.WithAlso); a deadline the wait would pass fails at once with
// context.DeadlineExceeded, and a canceled request with its context's
// error; a blocked request is refused before it waits; skip, no key,
// malformed key and cost, a cost that can never fit and dry run behave
// as guard.Guard.Wait says; and what outgoing requests cannot honour
// (guard.Guard.CheckOutbound) panics at construction, naming it.
//
// An adapter's test calls Run with its harness: it starts a [Server] of
// its own protocol, in front of which [Server.Client] builds the adapter,
// and it says how the adapter shows each [Refusal] to the caller.
package outboundtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/keyfunc"
)

// Harness is what the suite needs of one outbound adapter.
type Harness struct {
	// Constructor is the name the adapter's construction panics carry:
	// "Transport", "UnaryClientInterceptor".
	Constructor string
	// Start starts a server on a loopback port for one case, stopped
	// when t ends.
	Start func(t *testing.T) Server
	// Refused returns what is wrong with err, "" when nothing: err is
	// what the adapter returned for a request refused for why, and
	// already wraps the cause the suite expects (for example
	// context.DeadlineExceeded); Refused checks the adapter's own form,
	// such as a gRPC status code and message.
	Refused func(err error, why Refusal) string
}

// Server is a server that outgoing requests go to.
type Server interface {
	// Client builds the adapter on l with opts in front of the server,
	// panicking as the adapter's constructor does, and returns a Send
	// through it. Clients of one server share its default key (its
	// host, its target).
	Client(t *testing.T, l *core.Limiter, opts ...guard.Option) Send
	// Arrived returns how many requests reached the server.
	Arrived() int
	// Sent returns when each request left the adapter, after its limits:
	// recorded by the transport the adapter hands requests to.
	Sent() []time.Time
}

// Departures records when requests leave an adapter, for [Server.Sent]:
// a server's transport calls Leave as it takes a request from the
// adapter. It is safe for concurrent use; the zero value is ready.
type Departures struct {
	mu    sync.Mutex
	times []time.Time
}

// Leave records that a request leaves now.
func (d *Departures) Leave() {
	d.mu.Lock()
	d.times = append(d.times, time.Now())
	d.mu.Unlock()
}

// Sent returns when the requests left, in the order recorded.
func (d *Departures) Sent() []time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.times)
}

// Send sends one request (a call, a stream opened and read to its end)
// with header as its header fields (gRPC metadata), under ctx. It returns
// nil when the server answered it with success, and otherwise the error
// the adapter or the server returned.
type Send func(ctx context.Context, header map[string]string) error

// Refusal is why the adapter refused an outgoing request.
type Refusal int

const (
	// Deadline is a wait that would end after the request's deadline:
	// the error wraps context.DeadlineExceeded.
	Deadline Refusal = iota
	// Canceled is a request whose context was canceled while it waited:
	// the error wraps context.Canceled.
	Canceled
	// Blocked is a request guard.WithBlock refused: the error wraps
	// guard.ErrBlocked.
	Blocked
	// Invalid is a request without a key under guard.NoKeyReject, or with
	// a malformed key source or cost.
	Invalid
	// NeverFits is a request whose cost exceeds a limit: the error wraps
	// core.ErrInvalidCost.
	NeverFits
)

// String returns the name of r.
func (r Refusal) String() string {
	switch r {
	case Deadline:
		return "Deadline"
	case Canceled:
		return "Canceled"
	case Blocked:
		return "Blocked"
	case Invalid:
		return "Invalid"
	case NeverFits:
		return "NeverFits"
	}
	return "Refusal(" + strconv.Itoa(int(r)) + ")"
}

// Header fields the cases send.
const (
	userHeader   = testkit.UserHeader // the key of most cases: absent is no key, "!" malformed
	costHeader   = "X-Cost"           // the cost of a request, 1 when absent
	tenantHeader = "X-Tenant"         // "banned" is blocked
	skipHeader   = "X-Skip"           // present is skipped
)

// everyone keys every request by "all".
func everyone(keyfunc.Request) (string, error) { return "all", nil }

// costOf reads the cost from the X-Cost header.
func costOf(r keyfunc.Request) int64 {
	if c := r.Header(costHeader); c != "" {
		n, _ := strconv.ParseInt(c, 10, 64)
		return n
	}
	return 1
}

// user is the header of a request by u.
func user(u string) map[string]string { return map[string]string{userHeader: u} }

// Run runs the suite against the adapter of h.
func Run(t *testing.T, h Harness) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, h)
		})
	}
}

var cases = []struct {
	name string
	run  func(t *testing.T, h Harness)
}{
	{"fleet waits its turn", testFleetWait},
	{"fleet past the deadline fails fast", testFleetDeadline},
	{"every limit holds when sent", testAlsoHoldsWhenSent},
	{"past the deadline", testDeadline},
	{"canceled while waiting", testCanceled},
	{"blocked", testBlocked},
	{"skipped", testSkipped},
	{"no key", testNoKey},
	{"malformed key", testMalformedKey},
	{"cost", testCost},
	{"dry run", testDryRun},
	{"refused at construction", testConstruction},
}

// refused checks that err is a refusal for why wrapping cause (none when
// nil), in the adapter's form.
func refused(t *testing.T, h Harness, what string, err error, why Refusal, cause error) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s = nil, want refused (%v)", what, why)
	case cause != nil && !errors.Is(err, cause):
		t.Errorf("%s = %v, want refused (%v) with an error wrapping %v", what, err, why, cause)
	default:
		if msg := h.Refused(err, why); msg != "" {
			t.Errorf("%s = %v, refused (%v): %s", what, err, why, msg)
		}
	}
}

// passes sends n requests with header through send, each of which must
// reach the server without waiting (ctx is short).
func passes(t *testing.T, ctx context.Context, send Send, n int, header map[string]string, what string) {
	t.Helper()
	for i := range n {
		if err := send(ctx, header); err != nil {
			t.Errorf("%s #%d = %v, want nil at once", what, i+1, err)
		}
	}
}

// arrived checks that want requests reached srv.
func arrived(t *testing.T, srv Server, want int) {
	t.Helper()
	if got := srv.Arrived(); got != want {
		t.Errorf("%d requests reached the server, want %d", got, want)
	}
}

// holds checks that key holds want units in l's first rule; when says
// at which point of the case.
func holds(t *testing.T, l *core.Limiter, key string, want int64, when string) {
	t.Helper()
	d, err := l.Peek(context.Background(), key)
	if err != nil {
		t.Fatalf("Peek(%q): %v", key, err)
	}
	if got := d.Rules()[0].Used; got != want {
		t.Errorf("%s, %s holds %d units of %q, want %d", when, key, got, l.Policy().Name, want)
	}
}

// shortTime is the deadline of the requests of a case that no request
// reaches unless it waits for a limit of an hour.
const shortTime = 5 * time.Second

// short returns a context with a deadline shortTime from now, and a
// function reporting whether half of that time has passed: a request
// refused at once returns well before. (Checking ctx.Err() instead could
// miss a request that slept until the deadline and returned before the
// context's timer fired.)
func short(t *testing.T) (ctx context.Context, late func() bool) {
	ctx, cancel := context.WithTimeout(context.Background(), shortTime)
	t.Cleanup(cancel)
	start := time.Now()
	return ctx, func() bool { return time.Since(start) > shortTime/2 }
}

// Fleet cases: n instances, each with m goroutines sending, through one
// limit keyed by the adapter's default key.
const n, m = 4, 5

// testFleetWait: with 5 per 200 ms and no deadline, every request waits
// its turn and reaches the server, some after denials.
func testFleetWait(t *testing.T, h Harness) {
	for _, b := range testkit.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			srv := h.Start(t)
			obs := &testkit.Events{}
			ls := testkit.Fleet(t, n, b, testkit.Policy("burst", core.Rule{Limit: 5, Window: 200 * time.Millisecond}), core.WithObserver(obs))
			var wg sync.WaitGroup
			for _, l := range ls {
				send := srv.Client(t, l)
				for range m {
					wg.Go(func() {
						if err := send(context.Background(), nil); err != nil {
							t.Errorf("send = %v, want nil after waiting", err)
						}
					})
				}
			}
			wg.Wait()
			if srv.Arrived() != n*m || obs.Denials() == 0 {
				t.Errorf("%d requests reached the server after %d denials, want all %d after some waiting", srv.Arrived(), obs.Denials(), n*m)
			}
		})
	}
}

// testFleetDeadline: with 10 per hour and 5 s to wait, exactly 10
// requests reach the server and the others fail at once, before the
// deadline, with DeadlineExceeded.
func testFleetDeadline(t *testing.T, h Harness) {
	for _, b := range testkit.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			srv := h.Start(t)
			ls := testkit.Fleet(t, n, b, testkit.Policy("hour", testkit.PerHour(10)))
			ctx, _ := short(t)
			var ok, late atomic.Int64
			var wg sync.WaitGroup
			for _, l := range ls {
				send := srv.Client(t, l)
				for range m {
					wg.Go(func() {
						switch err := send(ctx, nil); {
						case err == nil:
							ok.Add(1)
						case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil && h.Refused(err, Deadline) == "":
							late.Add(1)
						default:
							t.Errorf("send = %v (context: %v), want nil, or refused (Deadline) before the deadline", err, ctx.Err())
						}
					})
				}
			}
			wg.Wait()
			if ok.Load() != 10 || late.Load() != n*m-10 || srv.Arrived() != 10 {
				t.Errorf("%d sent, %d failed fast, %d reached the server; want 10, %d, 10", ok.Load(), late.Load(), srv.Arrived(), n*m-10)
			}
		})
	}
}

// testAlsoHoldsWhenSent: with guard.WithAlso, every limit holds at the
// moment a request leaves. A limit of 3 per 400 ms by the default key,
// and a global one of 12 per 2 s, full when the requests start: 18
// requests never leave more than 3 within 400 ms, although the global
// limit frees 12 at once. (A unit of the first limit kept while waiting
// for the global one would be dated when taken, and the requests holding
// such units would leave together.)
func testAlsoHoldsWhenSent(t *testing.T, h Harness) {
	srv := h.Start(t)
	store := core.NewMemoryStore()
	per := testkit.Limiter(t, store, testkit.Policy("per", core.Rule{Limit: 3, Window: 400 * time.Millisecond}))
	global := testkit.Limiter(t, store, testkit.Policy("global", core.Rule{Limit: 12, Window: 2 * time.Second}))
	ctx := context.Background()
	if _, err := global.AllowN(ctx, "all", 12); err != nil {
		t.Fatal(err)
	}
	send := srv.Client(t, per, guard.WithAlso(global, everyone))
	var wg sync.WaitGroup
	for range 18 {
		wg.Go(func() {
			if err := send(ctx, nil); err != nil {
				t.Errorf("send = %v, want nil after waiting", err)
			}
		})
	}
	wg.Wait()
	sent := srv.Sent()
	if len(sent) != 18 {
		t.Fatalf("%d requests left, want 18", len(sent))
	}
	// Each span a tenth shorter than its window: the times are of the
	// requests' arrival, which scheduling on a loaded machine may delay
	// after their admission by some milliseconds. The first limit allows
	// 7.5 a second, more than the global one: both bind.
	if most := maxIn(sent, 340*time.Millisecond); most > 3 {
		t.Errorf("%d requests left within 340 ms; the first limit allows 3 per 400 ms", most)
	}
	if most := maxIn(sent, 1800*time.Millisecond); most > 12 {
		t.Errorf("%d requests left within 1.8 s; the global limit allows 12 per 2 s", most)
	}
}

// maxIn returns the most times that lie within any span of d.
func maxIn(times []time.Time, d time.Duration) int {
	ts := slices.Clone(times)
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	most := 0
	for i := range ts {
		j := i
		for j < len(ts) && ts[j].Sub(ts[i]) < d {
			j++
		}
		most = max(most, j-i)
	}
	return most
}

// testDeadline: keyed by a header, one request a user per hour: a
// user's second request, whose wait would pass its deadline, fails at
// once with DeadlineExceeded, holding nothing; and so does a request
// whose added limit (guard.WithAlso) is full for the hour, giving back
// the unit of the first limit.
func testDeadline(t *testing.T, h Harness) {
	srv := h.Start(t)
	l := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("deadline", testkit.PerHour(1)))
	send := srv.Client(t, l, guard.WithKey(testkit.UserKey))
	for _, u := range []string{"alice", "bob"} {
		if err := send(context.Background(), user(u)); err != nil {
			t.Fatalf("%s's first request = %v, want nil", u, err)
		}
	}
	ctx, late := short(t)
	refused(t, h, "alice's second request", send(ctx, user("alice")), Deadline, context.DeadlineExceeded)
	if late() {
		t.Errorf("alice's second request returned late, want at once")
	}
	holds(t, l, "alice", 1, "after a request refused past its deadline")

	full := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("full", testkit.PerHour(1)))
	if _, err := full.Allow(ctx, "all"); err != nil {
		t.Fatal(err)
	}
	also := srv.Client(t, l, guard.WithKey(testkit.UserKey), guard.WithAlso(full, everyone))
	refused(t, h, "carol's request with an added limit full", also(ctx, user("carol")), Deadline, context.DeadlineExceeded)
	if late() {
		t.Errorf("carol's request returned late, want at once")
	}
	holds(t, l, "carol", 0, "after a request refused by the added limit")
	arrived(t, srv, 2)
}

// testCanceled: a request whose context is canceled while it waits fails
// with context.Canceled.
func testCanceled(t *testing.T, h Harness) {
	srv := h.Start(t)
	obs := &testkit.Events{}
	l := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("cancel", testkit.PerHour(1)), core.WithObserver(obs))
	send := srv.Client(t, l)
	if err := send(context.Background(), nil); err != nil {
		t.Fatalf("first request = %v, want nil", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- send(ctx, nil) }()
	testkit.WaitUntil(t, "the second request waits", func() bool { return obs.Denials() == 1 })
	cancel()
	refused(t, h, "a request canceled while waiting", <-done, Canceled, context.Canceled)
	arrived(t, srv, 1)
}

// testBlocked: guard.WithBlock refuses a request before the skip
// predicate and before any wait, even on a full key, taking no unit.
func testBlocked(t *testing.T, h Harness) {
	srv := h.Start(t)
	obs := &testkit.Events{}
	l := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("block", testkit.PerHour(1)))
	banned := func(r keyfunc.Request) bool { return r.Header(tenantHeader) == "banned" }
	skip := func(r keyfunc.Request) bool { return r.Header(skipHeader) != "" }
	send := srv.Client(t, l, guard.WithKey(testkit.UserKey), guard.WithBlock(banned), guard.WithSkip(skip), guard.WithObserver(obs))
	if err := send(context.Background(), user("alice")); err != nil {
		t.Fatalf("alice's request = %v, want nil", err)
	}
	ctx, late := short(t)
	for _, hdr := range []map[string]string{
		{userHeader: "mallory", tenantHeader: "banned"},
		{userHeader: "alice", tenantHeader: "banned", skipHeader: "1"}, // alice's key is full
	} {
		refused(t, h, fmt.Sprintf("request %v", hdr), send(ctx, hdr), Blocked, guard.ErrBlocked)
	}
	if late() {
		t.Errorf("blocked requests returned late, want at once")
	}
	holds(t, l, "mallory", 0, "after a blocked request")
	if got := obs.Count(guard.EventBlock); got != 2 {
		t.Errorf("the observer saw %d blocks, want 2", got)
	}
	arrived(t, srv, 1)
}

// testSkipped: a skipped request leaves at once, without counting.
func testSkipped(t *testing.T, h Harness) {
	srv := h.Start(t)
	l := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("skip", testkit.PerHour(1)))
	skip := func(r keyfunc.Request) bool { return r.Header(skipHeader) != "" }
	send := srv.Client(t, l, guard.WithKey(testkit.UserKey), guard.WithSkip(skip))
	ctx, _ := short(t)
	if err := send(ctx, user("alice")); err != nil {
		t.Fatalf("alice's request = %v, want nil", err)
	}
	passes(t, ctx, send, 3, map[string]string{userHeader: "alice", skipHeader: "1"}, "skipped request")
	holds(t, l, "alice", 1, "after a request and 3 skipped")
	arrived(t, srv, 4)
}

// testNoKey: a request without a key is not limited by default, and
// refused under guard.NoKeyReject.
func testNoKey(t *testing.T, h Harness) {
	srv := h.Start(t)
	ctx, _ := short(t)
	skipped := srv.Client(t, testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("nokey", testkit.PerHour(1))), guard.WithKey(testkit.UserKey))
	passes(t, ctx, skipped, 3, nil, "request without a key")
	rejected := srv.Client(t, testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("reject", testkit.PerHour(1))),
		guard.WithKey(testkit.UserKey), guard.WithNoKey(guard.NoKeyReject))
	refused(t, h, "a request without a key under NoKeyReject", rejected(ctx, nil), Invalid, keyfunc.ErrNoKey)
	arrived(t, srv, 3)
}

// testMalformedKey: a malformed key source refuses the request, or,
// under guard.KeyErrorSkip, lets it go unlimited.
func testMalformedKey(t *testing.T, h Harness) {
	srv := h.Start(t)
	ctx, _ := short(t)
	l := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("badkey", testkit.PerHour(1)))
	send := srv.Client(t, l, guard.WithKey(testkit.UserKey))
	refused(t, h, "a request with a malformed key", send(ctx, user("!")), Invalid, testkit.ErrMalformedUser)
	skipping := srv.Client(t, l, guard.WithKey(testkit.UserKey), guard.WithKeyError(guard.KeyErrorSkip))
	passes(t, ctx, skipping, 2, user("!"), "request with a malformed key under KeyErrorSkip")
	arrived(t, srv, 2)
}

// testCost: a request costs what guard.WithCost says; a cost below 1 is
// malformed, and one above the limit can never fit: both are refused at
// once, holding nothing.
func testCost(t *testing.T, h Harness) {
	srv := h.Start(t)
	ctx, _ := short(t)
	l := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("cost", testkit.PerHour(3)))
	send := srv.Client(t, l, guard.WithKey(testkit.UserKey), guard.WithCost(costOf))
	if err := send(ctx, map[string]string{userHeader: "alice", costHeader: "2"}); err != nil {
		t.Fatalf("request of cost 2 = %v, want nil", err)
	}
	holds(t, l, "alice", 2, "after a request of cost 2")
	err := send(ctx, map[string]string{userHeader: "alice", costHeader: "0"})
	refused(t, h, "a request of cost 0", err, Invalid, nil)
	if errors.Is(err, core.ErrInvalidCost) {
		t.Errorf("a request of cost 0 = %v, want refused as malformed, not as a cost that never fits", err)
	}
	refused(t, h, "a request of cost 4 on a limit of 3", send(ctx, map[string]string{userHeader: "alice", costHeader: "4"}), NeverFits, core.ErrInvalidCost)
	holds(t, l, "alice", 2, "after two requests refused for their cost")
	arrived(t, srv, 1)
}

// testDryRun: under guard.WithDryRun a request over the limit leaves at
// once, reported as a dry-run event.
func testDryRun(t *testing.T, h Harness) {
	srv := h.Start(t)
	ctx, _ := short(t)
	obs := &testkit.Events{}
	l := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("dry", testkit.PerHour(1)))
	send := srv.Client(t, l, guard.WithKey(testkit.UserKey), guard.WithDryRun(true), guard.WithObserver(obs))
	passes(t, ctx, send, 3, user("alice"), "request under dry run")
	if got := obs.Count(guard.EventDryRun); got != 2 {
		t.Errorf("the observer saw %d dry-run events, want 2", got)
	}
	arrived(t, srv, 3)
}

// testConstruction: a nil limiter, and what outgoing requests cannot
// honour (guard.Guard.CheckOutbound), panic when the adapter is built,
// naming it.
func testConstruction(t *testing.T, h Harness) {
	srv := h.Start(t)
	l := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("p", testkit.PerHour(1)))
	conc := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "conc", InFlight: 1})
	always := func(int) bool { return true }
	for _, tc := range []struct {
		name string
		l    *core.Limiter
		opts []guard.Option
		want string // in the panic's message
	}{
		{"nil limiter", nil, nil, "nil"},
		{"WithCountIf", l, []guard.Option{guard.WithCountIf(always)}, "WithCountIf"},
		{"WithResetIf", l, []guard.Option{guard.WithResetIf(always)}, "WithResetIf"},
		{"InFlight", conc, nil, `InFlight policy "conc"`},
		{"InFlight added", l, []guard.Option{guard.WithAlso(conc, testkit.UserKey)}, `InFlight policy "conc"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				p := recover()
				if msg := fmt.Sprint(p); p == nil || !strings.Contains(msg, tc.want) || !strings.Contains(msg, h.Constructor) {
					t.Errorf("%s with %s: panic %v, want one naming %q", h.Constructor, tc.name, p, tc.want)
				}
			}()
			srv.Client(t, tc.l, tc.opts...)
		})
	}
	arrived(t, srv, 0)
}
