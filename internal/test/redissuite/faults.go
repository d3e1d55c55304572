package redissuite

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// faultEnv is what a fault acts on: the server and the proxy in front of
// it.
type faultEnv struct {
	srv   *redistest.Server
	proxy *redistest.Proxy
	hold  time.Duration
}

// faultKind is one way Redis fails.
type faultKind struct {
	name string
	// how describes the fault for the table.
	how string
	// viaProxy routes the limiters' clients through the proxy.
	viaProxy bool
	// inject starts the fault; heal ends it, hold after inject. A nil heal
	// means the fault ends by itself.
	inject, heal func(e *faultEnv)
	// sustained faults last the whole hold: the breaker must open.
	sustained bool
	// dataLoss: the server comes back empty (no persistence in tests).
	dataLoss bool
}

var faultKinds = []faultKind{
	{
		name: "stopped", how: "redis-server stopped for the hold, then started again (empty)",
		inject:    func(e *faultEnv) { e.srv.Stop() },
		heal:      func(e *faultEnv) { e.srv.Restart() },
		sustained: true, dataLoss: true,
	},
	{
		name: "paused", how: "CLIENT PAUSE ALL for the hold",
		inject:    func(e *faultEnv) { e.srv.Pause(e.hold) },
		sustained: true,
	},
	{
		name: "slowed", how: "proxy adds 150 ms to every reply (timeout 20 ms)", viaProxy: true,
		inject:    func(e *faultEnv) { e.proxy.SetLatency(150 * time.Millisecond) },
		heal:      func(e *faultEnv) { e.proxy.SetLatency(0) },
		sustained: true,
	},
	{
		name: "dropping", how: "proxy resets every connection, open or new", viaProxy: true,
		inject:    func(e *faultEnv) { e.proxy.SetDropping(true) },
		heal:      func(e *faultEnv) { e.proxy.SetDropping(false) },
		sustained: true,
	},
	{
		name: "restarted", how: "redis-server restarted at once (empty), under load",
		inject:   func(e *faultEnv) { e.srv.Restart() },
		dataLoss: true,
	},
	{
		name: "reset once", how: "proxy resets every open connection once", viaProxy: true,
		inject: func(e *faultEnv) { e.proxy.DropConnections() },
	},
}

// call is one decision of the load.
type call struct {
	fault     bool // made after the fault was injected
	key       string
	lat       time.Duration
	d         core.Decision
	err       error
	storeErrs int // EventStoreError events during the call
}

// faultRow is one measured line of the fault table.
type faultRow struct {
	fault, policy       string
	calls, fallbacks    int
	errs                int
	failed, open        []time.Duration
	recovery            time.Duration
	floodAdmitted, over int
	hotAdmitted         int
	ghosts              int64
	preAdmitted         int
	breakerOpens        int
	baseline            time.Duration
}

// testRedisFaults runs every fault against every failure policy with two
// app instances (two limiters, each with its own client) deciding one key
// in a loop, and measures what the app sees: errors (want none), the
// latency a failing store call adds (bounded by the timeout) and the
// latency once the breaker is open (near zero), how long decisions take
// to come from Redis again after the fault ends (automatic), and how many
// requests were admitted beyond the limit. It logs the fault table of the
// README.
func testRedisFaults(t *testing.T, drv Driver) {
	const (
		limit     = 5
		instances = 2
		hold      = 500 * time.Millisecond
		cooldown  = 200 * time.Millisecond
		timeout   = defaultTimeout
	)
	policies := []core.FailurePolicy{core.FailLocal, core.FailOpen, core.FailClosed}
	var rows []faultRow
	begin := time.Now()
	for _, fk := range faultKinds {
		for _, fp := range policies {
			t.Run(fk.name+"/"+fp.String(), func(t *testing.T) {
				row := runFault(t, drv, fk, fp, faultParams{
					limit: limit, instances: instances, hold: hold, cooldown: cooldown, timeout: timeout,
				})
				rows = append(rows, row)
			})
		}
	}
	t.Logf("fault table (%d instances, Limit %d per minute, timeout %v, breaker 5 failures / %v cool-down, hold %v), measured in %v:\n%s",
		instances, limit, timeout, cooldown, hold, time.Since(begin).Round(time.Millisecond), faultTable(rows, limit))
}

type faultParams struct {
	limit, instances int
	hold, cooldown   time.Duration
	timeout          time.Duration
}

// instance is one app instance of a fault run.
type instance struct {
	l     *core.Limiter
	obs   *testkit.EventCounts
	calls []call
	// recovered is when this instance first got a decision from the
	// store after the fault ended (unix nanoseconds); 0 until then.
	recovered atomic.Int64
}

func runFault(t *testing.T, drv Driver, fk faultKind, fp core.FailurePolicy, prm faultParams) faultRow {
	t.Helper()
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	env := &faultEnv{srv: srv, proxy: proxy, hold: prm.hold}
	addr := srv.Addr()
	if fk.viaProxy {
		addr = proxy.Addr()
	}
	p := core.Policy{Name: "faults", Rules: []core.Rule{{Limit: int64(prm.limit), Window: time.Minute}}}
	insts := make([]*instance, prm.instances)
	for i := range insts {
		// Default client options (go-redis ignores context deadlines): the
		// store enforces the timeout itself.
		obs := &testkit.EventCounts{}
		insts[i] = &instance{obs: obs, l: testkit.Limiter(t, drv.Open(t, Conf{Addrs: []string{addr}}), p,
			core.WithFailurePolicy(fp), core.WithBreaker(5, prm.cooldown), core.WithObserver(obs), core.WithTimeout(prm.timeout))}
	}
	ctx := context.Background()
	// The set-up goes through a limiter with a long timeout: on a loaded
	// machine a 20 ms call can time out before any fault.
	setup := testkit.Limiter(t, drv.New(t, srv), p, core.WithTimeout(5*time.Second), core.WithDenyCache(0))
	// "pre" holds limit-2 units in Redis before the fault; after it, the
	// store should admit exactly 2 more if the window survived.
	for i := range prm.limit - 2 {
		if d, err := setup.Allow(ctx, "pre"); err != nil || !d.Allowed || d.Source != core.SourceStore {
			t.Fatalf("Allow(pre) #%d before the fault = %+v, %v; want admitted by the store", i+1, d, err)
		}
	}
	// "hot" is full before the fault, and every instance has had it
	// denied by the store (so its deny cache holds the denial).
	for i := range prm.limit {
		if d, err := setup.Allow(ctx, "hot"); err != nil || !d.Allowed || d.Source != core.SourceStore {
			t.Fatalf("Allow(hot) #%d before the fault = %+v, %v; want admitted by the store", i+1, d, err)
		}
	}
	for i, in := range insts {
		var d core.Decision
		for try := 0; try < 50 && d.Source != core.SourceCache; try++ {
			var err error
			if d, err = in.l.Allow(ctx, "hot"); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Millisecond)
		}
		if d.Source != core.SourceCache || d.Allowed {
			t.Fatalf("instance %d: Allow(hot) over the limit before the fault = %+v; want denied from the deny cache", i, d)
		}
	}

	var (
		faulting atomic.Bool
		flooding atomic.Bool
		healedAt atomic.Int64 // unix nanoseconds; 0 until healed
		stop     atomic.Bool
		wg       sync.WaitGroup
	)
	for i, in := range insts {
		wg.Go(func() {
			for n := 0; !stop.Load(); n++ {
				// A new client every time, which the store (or the
				// fallback) must decide; once the fault is in effect, every
				// third call floods a key first seen then, and every third
				// one a key the store denied before the fault (which the
				// deny cache answers).
				c := call{fault: faulting.Load(), key: fmt.Sprintf("new-%d-%d", i, n)}
				if flooding.Load() {
					switch n % 3 {
					case 0:
						c.key = "flood"
					case 1:
						c.key = "hot"
					}
				}
				errs := in.obs.Count(core.EventStoreError)
				start := time.Now()
				c.d, c.err = in.l.Allow(ctx, c.key)
				c.lat = time.Since(start)
				c.storeErrs = in.obs.Count(core.EventStoreError) - errs
				if healedAt.Load() != 0 && in.recovered.Load() == 0 && c.err == nil && c.d.Source == core.SourceStore {
					in.recovered.Store(time.Now().UnixNano())
				}
				in.calls = append(in.calls, c)
				time.Sleep(time.Millisecond)
			}
		})
	}

	time.Sleep(100 * time.Millisecond) // baseline
	faulting.Store(true)
	fk.inject(env)
	flooding.Store(true)
	if fk.heal != nil || fk.sustained {
		time.Sleep(prm.hold)
	}
	if fk.heal != nil {
		fk.heal(env)
	}
	healed := time.Now()
	healedAt.Store(healed.UnixNano())
	// Wait until every instance decides from Redis again, then a little
	// more.
	recoverBy := healed.Add(prm.cooldown + 4*time.Second)
	for time.Now().Before(recoverBy) && !allRecovered(insts) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	stop.Store(true)
	wg.Wait()

	row := faultRow{fault: fk.name, policy: fp.String()}
	var baseline []time.Duration
	for i, in := range insts {
		row.breakerOpens += in.obs.Count(core.EventBreakerOpen)
		if r := in.recovered.Load(); r == 0 {
			t.Errorf("instance %d: no decision from Redis within %v after the fault ended", i, recoverBy.Sub(healed))
		} else {
			row.recovery = max(row.recovery, time.Unix(0, r).Sub(healed))
		}
		for _, c := range in.calls {
			if c.err != nil {
				row.errs++
				if row.errs <= 3 {
					t.Errorf("instance %d: Allow(%s) = %v: an error reached the app", i, c.key, c.err)
				}
				continue
			}
			if !c.fault {
				if c.d.Source == core.SourceStore {
					baseline = append(baseline, c.lat)
				}
				continue
			}
			row.calls++
			switch {
			case !c.d.Allowed:
			case c.key == "flood":
				row.floodAdmitted++
			case c.key == "hot":
				row.hotAdmitted++
			}
			src := c.d.Source
			switch {
			case src == core.SourceStore || src == core.SourceCache:
			case src != fallbackSource(fp):
				t.Errorf("instance %d: Allow(flood) = %+v, want Source %v, store or cache under %v", i, c.d, fallbackSource(fp), fp)
			case c.storeErrs > 0:
				row.fallbacks++
				row.failed = append(row.failed, c.lat)
			default:
				row.fallbacks++
				row.open = append(row.open, c.lat)
			}
			if src == core.SourceOpen && !c.d.Allowed || src == core.SourceClosed && c.d.Allowed {
				t.Errorf("instance %d: Allow(flood) = %+v, inconsistent with its Source", i, c.d)
			}
		}
	}
	row.baseline = median(baseline)
	row.over = max(0, row.floodAdmitted-prm.limit)
	admin := srv.Client(t)
	if !fk.dataLoss {
		row.ghosts = zcard(t, admin, drv.New(t, srv).Key(p.Name, "flood")) - int64(storeAdmitted(insts, "flood"))
	}

	// The window of "pre": kept, or forgotten by a server that came back
	// empty. Read through a new client: the set-up limiter's sat idle
	// through the fault, and a client that sends no write twice
	// (Driver.Redials) fails its first call on each connection the fault
	// closed.
	count := testkit.Limiter(t, drv.New(t, srv), p, core.WithTimeout(5*time.Second), core.WithDenyCache(0))
	for range prm.limit + 1 {
		d, err := count.Allow(ctx, "pre")
		if err != nil || d.Source != core.SourceStore {
			t.Fatalf("Allow(pre) after recovery = %+v, %v; want a decision of the store", d, err)
		}
		if !d.Allowed {
			break
		}
		row.preAdmitted++
	}

	// The bounds.
	if fk.sustained {
		if row.breakerOpens < prm.instances {
			t.Errorf("breaker opened %d times over %d instances, want at least once each", row.breakerOpens, prm.instances)
		}
		if len(row.open) == 0 || len(row.failed) == 0 {
			t.Errorf("%d failed store calls and %d calls with the breaker open, want both", len(row.failed), len(row.open))
		}
	}
	checkLatencies(t, fk.name+", failing store calls", row.failed, prm.timeout+latencyMargin)
	checkNearZero(t, fk.name+", breaker open", row.open)
	// A key denied before the fault stays denied while the store fails
	// (the deny cache answers). A server that comes back empty has
	// forgotten its window: once the instances hear from it again they
	// let it decide, and it admits the key's limit anew, no more.
	if hotBound := map[bool]int{true: prm.limit, false: 0}[fk.dataLoss]; row.hotAdmitted > hotBound {
		t.Errorf("a key the store denied before the fault was admitted %d times during it, want at most %d (deny cache)", row.hotAdmitted, hotBound)
	}
	wantPre := 2
	if fk.dataLoss {
		wantPre = prm.limit
	}
	if row.preAdmitted != wantPre {
		t.Errorf("Allow(pre) after recovery admitted %d, want %d (window %s)", row.preAdmitted, wantPre,
			map[bool]string{true: "forgotten by the restart", false: "kept"}[fk.dataLoss])
	}
	var lost int
	if fk.dataLoss {
		lost = prm.limit // what the store admitted before it forgot
	}
	switch fp {
	case core.FailLocal:
		// Each instance admits up to the limit locally while Redis is away.
		if bound := prm.instances*prm.limit + lost; row.over > bound {
			t.Errorf("FailLocal over-admitted %d on one key, want at most %d (the limit per instance)", row.over, bound)
		}
	case core.FailClosed:
		if row.over > lost {
			t.Errorf("FailClosed over-admitted %d on one key, want at most %d", row.over, lost)
		}
	}
	t.Logf("%s/%v: %d decisions during the fault, %d fallbacks, %d errors; failing calls %s; breaker open %s; recovery %v; flood admitted %d (over %d), hot %d; ghost units %d; pre admitted %d after",
		fk.name, fp, row.calls, row.fallbacks, row.errs, durations(row.failed), durations(row.open), row.recovery.Round(time.Millisecond),
		row.floodAdmitted, row.over, row.hotAdmitted, row.ghosts, row.preAdmitted)
	return row
}

// allRecovered reports whether every instance has had a decision from the
// store since the fault ended.
func allRecovered(insts []*instance) bool {
	for _, in := range insts {
		if in.recovered.Load() == 0 {
			return false
		}
	}
	return true
}

func fallbackSource(fp core.FailurePolicy) core.Source {
	switch fp {
	case core.FailOpen:
		return core.SourceOpen
	case core.FailClosed:
		return core.SourceClosed
	}
	return core.SourceLocal
}

// storeAdmitted counts the admissions of key decided by the store.
func storeAdmitted(insts []*instance, key string) int {
	n := 0
	for _, in := range insts {
		for _, c := range in.calls {
			if c.key == key && c.err == nil && c.d.Allowed && c.d.Source == core.SourceStore {
				n++
			}
		}
	}
	return n
}

// checkNearZero fails t unless the calls made with the breaker open took
// next to nothing: a median under 2 ms and at most 1% over 10 ms (a
// loaded machine stalls now and then; a store call would show in every
// call).
func checkNearZero(t *testing.T, what string, lats []time.Duration) {
	t.Helper()
	if len(lats) == 0 {
		return
	}
	if m := median(lats); m > 2*time.Millisecond {
		t.Errorf("%s: median %v, want near zero (%s)", what, m, durations(lats))
	}
	over := 0
	for _, l := range lats {
		if l > 10*time.Millisecond {
			over++
		}
	}
	if over > 1 && over*100 > len(lats) {
		t.Errorf("%s: %d of %d calls over 10 ms, want near zero (%s)", what, over, len(lats), durations(lats))
	}
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func pmax(ds []time.Duration) string {
	if len(ds) == 0 {
		return "—"
	}
	return fmt.Sprintf("%s / %s (%d)", roundDur(median(ds)), roundDur(slices.Max(ds)), len(ds))
}

func roundDur(d time.Duration) string {
	switch {
	case d < 100*time.Microsecond:
		return d.Round(time.Microsecond).String()
	case d < 10*time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(100 * time.Microsecond).String()
}

// faultTable formats the rows as the README's markdown table.
func faultTable(rows []faultRow, limit int) string {
	var b strings.Builder
	var base []time.Duration
	for _, r := range rows {
		base = append(base, r.baseline)
	}
	fmt.Fprintf(&b, "healthy store call: p50 %s\n\n", roundDur(median(base)))
	b.WriteString("| fault | policy | decisions during the fault (by fallback) | errors to app | failing store call p50 / max (n) | breaker open p50 / max (n) | back on Redis after the fault | new key flooded (limit " +
		fmt.Sprint(limit) + "): admitted | key denied before: admitted | window before the fault |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		window := "kept"
		if r.preAdmitted != 2 {
			window = "forgotten (empty restart)"
		}
		over := fmt.Sprintf("%d (+%d)", r.floodAdmitted, r.over)
		if r.ghosts > 0 {
			over += fmt.Sprintf("; %d more recorded by timed-out calls", r.ghosts)
		}
		fmt.Fprintf(&b, "| %s | %s | %d (%d) | %d | %s | %s | %s | %s | %d | %s |\n",
			r.fault, r.policy, r.calls, r.fallbacks, r.errs, pmax(r.failed), pmax(r.open),
			roundDur(r.recovery), over, r.hotAdmitted, window)
	}
	return b.String()
}

// testRedisScriptsAfterRestart: a server restarted empty has lost the
// script cache; the next call of each script reloads it (FCALL answers
// that the function is missing, the store loads the library and calls
// again) and the decision comes from the store, with no error and no
// fallback. RedisLibraryReload covers FUNCTION FLUSH and SCRIPT FLUSH.
func testRedisScriptsAfterRestart(t *testing.T, drv Driver) {
	if !drv.Redials {
		t.Skipf("%s fails the first call on the connection a restart closed (it sends no write twice): "+
			"a restart is not transparent to it (RedisFaults measures what it costs); its library reload is RedisLibraryReload's", drv.Name)
	}
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	obs := &testkit.EventCounts{}
	opts := []core.Option{core.WithObserver(obs), core.WithTimeout(2 * time.Second)}
	rules := []core.Rule{{Limit: 10, Window: time.Minute}}
	logL := testkit.Limiter(t, drv.New(t, srv), core.Policy{Name: "restart-log", Rules: rules}, opts...)
	bucketL := testkit.Limiter(t, drv.New(t, srv), core.Policy{Name: "restart-buckets", Rules: rules, Algorithm: core.SlidingBuckets}, opts...)
	ctx := context.Background()
	allow := func(l *core.Limiter) func() (core.Decision, error) {
		return func() (core.Decision, error) { return l.Allow(ctx, "k") }
	}
	for _, tc := range []struct {
		name string
		do   func() (core.Decision, error)
	}{
		{"SlidingLog", allow(logL)},
		{"SlidingBuckets", allow(bucketL)},
		{"Refund", func() (core.Decision, error) {
			// The library is loaded by this Refund on the restarted
			// server: the Allow ran before the restart.
			d, err := logL.Allow(ctx, "r")
			if err != nil {
				return d, err
			}
			srv.Restart()
			return d, d.Refund(ctx)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Load the scripts, then lose them.
			if d, err := tc.do(); err != nil || d.Source != core.SourceStore {
				t.Fatalf("before the restart = %+v, %v; want a decision of the store", d, err)
			}
			srv.Restart()
			errs := obs.Count(core.EventStoreError)
			d, err := tc.do()
			if err != nil {
				t.Fatalf("after the restart: %v", err)
			}
			if d.Source != core.SourceStore || !d.Allowed {
				t.Errorf("after the restart = %+v, want admitted by the store", d)
			}
			if got := obs.Count(core.EventStoreError) - errs; got != 0 {
				t.Errorf("%d store errors after the restart, want 0 (reload is transparent)", got)
			}
			// commandstats start from zero on the restarted server.
			if got := commandCalls(t, rdb, "function|load"); got != 1 {
				t.Errorf("FUNCTION LOAD ran %d times on the restarted server, want 1 (reload)", got)
			}
		})
	}
}
