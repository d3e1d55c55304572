package main

import (
	"bufio"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
)

func TestHistogramQuantile(t *testing.T) {
	tests := []struct {
		name   string
		values []time.Duration
		q      float64
		want   time.Duration
		tol    float64 // relative
	}{
		{"empty", nil, 0.5, 0, 0},
		{"small exact", []time.Duration{3, 3, 3}, 0.5, 3, 0},
		{"median of uniform", uniform(1, 10000), 0.5, 5000 * time.Nanosecond, 0.04},
		{"p99 of uniform", uniform(1, 10000), 0.99, 9900 * time.Nanosecond, 0.04},
		{"milliseconds", []time.Duration{time.Millisecond, 2 * time.Millisecond, 40 * time.Millisecond}, 0.99, 40 * time.Millisecond, 0.04},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var h histogram
			for _, v := range tc.values {
				h.add(v)
			}
			got := h.quantile(tc.q)
			if diff := float64(got - tc.want); diff > tc.tol*float64(tc.want) || -diff > tc.tol*float64(tc.want) {
				t.Errorf("quantile(%v) = %v, want %v within %.0f%%", tc.q, got, tc.want, tc.tol*100)
			}
		})
	}
}

func uniform(lo, hi int) []time.Duration {
	var out []time.Duration
	for v := lo; v <= hi; v++ {
		out = append(out, time.Duration(v))
	}
	return out
}

// TestBuckets checks that every value lands in a bucket whose range holds
// it, across the whole range of durations.
func TestBuckets(t *testing.T) {
	for _, v := range []uint64{0, 1, 31, 32, 33, 63, 64, 65, 1000, 1 << 20, 123456789, 1<<62 + 12345} {
		i := bucketOf(v)
		lo, w := bucketRange(i)
		if v < lo || v >= lo+w || i >= histBuckets {
			t.Errorf("bucketOf(%d) = %d, range [%d, %d)", v, i, lo, lo+w)
		}
	}
}

func TestParseBenchmarkCSV(t *testing.T) {
	out := `"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
"EVALSHA abc 1 k 1000 5 __rand_int__","62500.00","0.044","0.016","0.039","0.079","0.111","0.207"
`
	got, err := parseBenchmarkCSV([]byte(out), ceilingRun{clients: 16, pipeline: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := ceilingResult{ceilingRun: ceilingRun{16, 1}, rps: 62500, p50: 39 * time.Microsecond, p99: 111 * time.Microsecond}
	if got != want {
		t.Errorf("parseBenchmarkCSV = %+v, want %+v", got, want)
	}
	for _, bad := range []string{"", `"test","rps"` + "\n", `"test","qps"` + "\n" + `"x","1"` + "\n"} {
		if _, err := parseBenchmarkCSV([]byte(bad), ceilingRun{}); err == nil {
			t.Errorf("parseBenchmarkCSV(%q) succeeded, want an error", bad)
		}
	}
}

func TestFormat(t *testing.T) {
	tests := []struct{ got, want string }{
		{fmtOps(0), "0"},
		{fmtOps(999.4), "999"},
		{fmtOps(1234567), "1,234,567"},
		{fmtDur(0), "–"},
		{fmtDur(250), "250 ns"},
		{fmtDur(31 * time.Microsecond), "31 µs"},
		{fmtDur(1500 * time.Microsecond), "1.5 ms"},
		{fmtRatio(3, 2), "1.50×"},
		{fmtRatio(3, 0), "–"},
		{shortCount(1e4), "10k"},
		{shortCount(1e6), "1M"},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// TestMeasure drives a trivial limiter and checks the counts add up.
func TestMeasure(t *testing.T) {
	allow := func(context.Context, string) (bool, error) { return true, nil }
	r := measure(context.Background(), allow, []string{"a", "b"}, 4, 10*time.Millisecond, 50*time.Millisecond, 1)
	if r.ops == 0 || r.allowed != r.ops || r.errs != 0 || r.elapsed < 50*time.Millisecond || r.p50 <= 0 || r.clientCPU <= 0 {
		t.Errorf("measure = %+v, want some admitted decisions with latencies and client CPU over at least 50ms", r)
	}
}

// TestReport writes the Markdown and the charts of a small fake run.
func TestReport(t *testing.T) {
	pats := patterns()[:1]
	var libs []*library // ratekit and redis_rate on Redis
	for _, l := range libraries() {
		if l.store == "redis" && (l.name == nameRatekit || l.name == nameRedisRate) {
			libs = append(libs, l)
		}
	}
	rep := &report{goroutines: []int{1, 16}, patterns: pats,
		ceilings: []ceilingResult{{ceilingRun: ceilingRun{1, 1}, rps: 10000}, {ceilingRun: ceilingRun{16, 1}, rps: 60000}}}
	for _, g := range rep.goroutines {
		rep.cells = append(rep.cells,
			cell{lib: libs[0], pat: pats[0], g: g, res: result{ops: 20000 * int64(g), allowed: 20000 * int64(g), elapsed: time.Second,
				mallocs: 200000 * uint64(g), clientCPU: time.Duration(g) * 1100 * time.Millisecond,
				redis: redisCost{scriptCalls: 10000 * float64(g), allUsec: 60000 * float64(g), cpuUsec: 100000 * float64(g)}}},
			cell{lib: libs[1], pat: pats[0], g: g, res: result{ops: 10000 * int64(g), allowed: 10000 * int64(g), elapsed: time.Second,
				mallocs: 160000 * uint64(g), clientCPU: time.Duration(g) * 400 * time.Millisecond,
				redis: redisCost{scriptCalls: 10000 * float64(g), allUsec: 50000 * float64(g)}}})
	}
	rep.ping = &result{ops: 15000, elapsed: time.Second, clientCPU: 600 * time.Millisecond} // 40 µs a call
	var b strings.Builder
	rep.writeMarkdown(&b)
	for _, want := range []string{
		"| ratekit | redis | sliding log (Redis Function, packed string, batched) | 16 | 320,000 | – | – | 5.33× | 1.00× | 100.0% | 0 | 10.0 | 55.0 | 3.00 | 5.00 | 0.500 |",
		"| go-redis/redis_rate | redis | GCRA (Lua, EVALSHA) | 1 | 10,000 | – | – | 1.00× | 0.50× | 100.0% | 0 | 16.0 | 40.0 | 5.00 | 0.00 | 1.000 |",
		"A go-redis `PING` through the same client, one goroutine: 15,000 calls/s, 40.0 µs of client CPU per call.",
		"| ratekit | hot | 20,000 | 55.0 | +15.0 µs | **not met** |",
		"| go-redis/redis_rate | hot | 10,000 | 40.0 | +0.0 µs | – |",
		"| 1 | Redis decisions/s, hot key, c=16 | 320,000 | go-redis/redis_rate 160,000 | 2.00× go-redis/redis_rate | ≥ 1.00× fastest peer | met |",
		"| 2 | Redis µs per decision (commandstats), hot key, c=1 | 3.00 µs | go-redis/redis_rate 5.00 µs | 0.60× go-redis/redis_rate | ≤ 1.00× go-redis/redis_rate | met |",
		"| 2 | client allocations per Redis decision, hot key, c=1 | 10.0 (0 B) | go-redis/redis_rate 16.0 | 0.62× go-redis/redis_rate | ≤ 12 | met |",
		"| 3 | memory store ns/op, RunParallel, hot key | – | – | – | ≤ 1.00× x/time/rate | not measured |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("Markdown lacks %q:\n%s", want, b.String())
		}
	}
	dir := t.TempDir()
	if err := rep.writeChart(dir + "/t.svg"); err != nil {
		t.Errorf("writeChart: %v", err)
	}
	if err := rep.writeGoalsChart(dir + "/g.svg"); err != nil {
		t.Errorf("writeGoalsChart: %v", err)
	}
	// One goroutine count (-goroutines 1): the chart's log axis still has
	// a range.
	one := *rep
	one.goroutines, one.cells, one.ceilings = []int{1}, rep.cells[:2], rep.ceilings[:1]
	if err := one.writeChart(dir + "/one.svg"); err != nil {
		t.Errorf("writeChart of one goroutine count: %v", err)
	}
}

// TestGoals checks the verdicts of goals 3 to 6 on fake numbers, on both
// sides of each bound.
func TestGoals(t *testing.T) {
	pats := patterns()
	byName := map[string]*pattern{}
	for _, p := range pats {
		byName[p.name] = p
	}
	lib := func(name, store string) *library {
		for _, l := range libraries() {
			if l.name == name && l.store == store {
				return l
			}
		}
		t.Fatalf("no library %s (%s)", name, store)
		return nil
	}
	rk, xr := lib(nameRatekit, "memory"), lib(nameXRate, "memory")
	rep := &report{goroutines: []int{1, 64}, patterns: pats,
		ceilings: []ceilingResult{{ceilingRun: ceilingRun{1, 1}, rps: 1000}, {ceilingRun: ceilingRun{64, 1}, rps: 100000}},
		micro: []microResult{
			{lib: rk, pat: byName["hot"], parallel: true, nsPerOp: 90, ops: 100, allowed: 100},
			{lib: xr, pat: byName["hot"], parallel: true, nsPerOp: 100, ops: 100, allowed: 100},
			{lib: rk, pat: byName["10k"], parallel: true, nsPerOp: 110, ops: 100, allowed: 50},
			{lib: xr, pat: byName["10k"], parallel: true, nsPerOp: 100, ops: 100, allowed: 100},
			{lib: rk, pat: byName["denied"], parallel: false, allocs: 1},
		},
		middleware: []mwResult{
			{name: mwNethttp, bareNs: 100, wrappedNs: 240, bareAllocs: 1, allocs: 3},
			{name: mwGin, bareNs: 100, wrappedNs: 260, bareAllocs: 1, allocs: 2},
			{name: mwEcho, bareNs: 100, wrappedNs: 200, bareAllocs: 1, allocs: 4},
			{name: mwUlule, bareNs: 100, wrappedNs: 800, bareAllocs: 1, allocs: 15},
		},
		footprints: []footprint{
			{lib: nameRatekit, kind: fpLog, limit: 100, entries: 100, bytes: 1000, perEntry: 10},
			{lib: nameRatekit, kind: fpLog, limit: 10, entries: 10, bytes: 200, perEntry: 20},
			{lib: nameRatekit, kind: fpBuckets, what: "ratekit SlidingBuckets, 100000/day, 60 buckets, all live", entries: 60, bytes: 1500},
			{lib: nameRedisRate, kind: fpPeer, bytes: 80},
		},
	}
	for _, g := range rep.goroutines {
		rep.cells = append(rep.cells, cell{lib: lib(nameRatekit, "redis"), pat: byName["denied"], g: g,
			res: result{ops: 100000 * int64(g), elapsed: time.Second}})
	}
	want := map[string]verdict{
		"memory store ns/op, RunParallel, hot key":                                                 met,
		"memory store ns/op, RunParallel, 10k keys":                                                notMet,
		"memory store allocations per decision, allowed path (the more of serial and RunParallel)": met,
		"memory store allocations per decision, denied path (the more of serial and RunParallel)":  notMet,
		"middleware overhead per allowed request: " + mwNethttp:                                    met,
		"middleware overhead per allowed request: " + mwGin:                                        notMet, // 160 ns
		"middleware overhead per allowed request: " + mwEcho:                                       notMet, // 3 allocs
		"middleware overhead per allowed request: " + mwFiber:                                      unknown,
		"SlidingLog bytes per live admission, limit 100":                                           met,
		"SlidingLog bytes per live admission, limit 10":                                            notMet,
		"SlidingBuckets bytes per key, 100000/day, 60 buckets, all live":                           met,
		"denied flood decisions/s against the ceiling, c=1":                                        met,    // 100×
		"denied flood decisions/s against the ceiling, c=64":                                       notMet, // 64×
	}
	got := map[string]goalRow{}
	for _, g := range rep.goals() {
		got[g.name] = g
	}
	for name, v := range want {
		g, ok := got[name]
		if !ok {
			t.Errorf("no goal row %q", name)
			continue
		}
		if g.verdict != v {
			t.Errorf("goal %q: verdict %v, want %v (row %+v)", name, g.verdict, v, g)
		}
	}
	if g := got["memory store ns/op, RunParallel, 10k keys"]; !strings.Contains(g.value, "only 50.0% admitted") {
		t.Errorf("10k row value %q does not flag the limit reached", g.value)
	}
	if g := got["middleware overhead per allowed request: "+mwNethttp]; g.value != "+140 ns, +2 allocs" || g.ratio != "0.20× ulule/limiter stdlib (ns)" {
		t.Errorf("nethttp row = %+v", g)
	}
}

func TestParseRedisCost(t *testing.T) {
	info := "# Commandstats\r\ncmdstat_evalsha:calls=300,usec=1500,usec_per_call=5.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_fcall:calls=100,usec=900,usec_per_call=9.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_get:calls=7,usec=70,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_info:calls=2,usec=500,usec_per_call=250.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_config|resetstat:calls=1,usec=40,usec_per_call=40.00,rejected_calls=0,failed_calls=0\r\n"
	want := redisCost{scriptCalls: 400, scriptUsec: 2400, allUsec: 2470}
	if got := parseRedisCost(info); got != want {
		t.Errorf("parseRedisCost = %+v, want %+v", got, want)
	}
	if got := parseRedisCost("# Commandstats\r\n"); got != (redisCost{}) {
		t.Errorf("parseRedisCost(empty) = %+v, want zero", got)
	}
}

func TestParseCPUSeconds(t *testing.T) {
	info := "# CPU\r\nused_cpu_sys:1.250000\r\nused_cpu_user:2.500000\r\nused_cpu_sys_children:9.000000\r\n"
	if got, ok := parseCPUSeconds(info); !ok || got != 3.75 {
		t.Errorf("parseCPUSeconds = %v, %v, want 3.75, true", got, ok)
	}
	if _, ok := parseCPUSeconds("# CPU\r\nused_cpu_sys:1\r\n"); ok {
		t.Error("parseCPUSeconds without used_cpu_user succeeded")
	}
}

// TestMiddlewareCases serves one request through every middleware case,
// bare and wrapped: each must be allowed (200), so that the benchmarks
// measure the allowed path.
func TestMiddlewareCases(t *testing.T) {
	for _, c := range middlewareCases() {
		t.Run(c.name, func(t *testing.T) {
			bare, wrapped, err := c.build()
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				if got := bare(); got != 200 {
					t.Errorf("bare: status %d, want 200", got)
				}
				if got := wrapped(); got != 200 {
					t.Errorf("wrapped: status %d, want 200", got)
				}
			}
		})
	}
}

// TestPatternsConstruct builds every in-memory library on every pattern:
// the limits must be ones every library accepts.
func TestPatternsConstruct(t *testing.T) {
	for _, p := range patterns() {
		for _, l := range libraries() {
			if l.store != "memory" {
				continue
			}
			allow, closeFn, err := l.setup(&env{}, p)
			if err != nil {
				t.Errorf("%s on %s: %v", l.name, p.name, err)
				continue
			}
			ok, err := allow(context.Background(), p.keys[0])
			closeFn()
			if err != nil || !ok {
				t.Errorf("%s on %s: first decision = %v, %v, want allowed", l.name, p.name, ok, err)
			}
		}
	}
	if _, err := core.NewLimiter(core.NewMemoryStore(), ratekitPolicy(patterns()[0], "redis")); err != nil {
		t.Errorf("the Redis policy of the hot pattern: %v", err)
	}
}

// TestTouchAll checks that every key is decided exactly once, and that
// an error stops the touching and is returned.
func TestTouchAll(t *testing.T) {
	keys := patterns()[1].keys
	var mu sync.Mutex
	seen := map[string]int{}
	allow := func(_ context.Context, key string) (bool, error) {
		mu.Lock()
		seen[key]++
		mu.Unlock()
		return true, nil
	}
	if err := touchAll(context.Background(), allow, keys); err != nil {
		t.Fatal(err)
	}
	if len(seen) != len(keys) {
		t.Errorf("touched %d keys, want %d", len(seen), len(keys))
	}
	for k, n := range seen {
		if n != 1 {
			t.Errorf("key %q touched %d times, want 1", k, n)
		}
	}
	boom := errors.New("boom")
	failing := func(context.Context, string) (bool, error) { return false, boom }
	if err := touchAll(context.Background(), failing, keys); !errors.Is(err, boom) {
		t.Errorf("touchAll with a failing allow = %v, want %v", err, boom)
	}
}

// TestRounds checks the interleaved order of the rounds and what a cell
// of rounds reports: the medians of ops/s and p99, the sums of the
// counts.
func TestRounds(t *testing.T) {
	var libs []*library
	for _, l := range libraries() {
		if l.store == "redis" {
			libs = append(libs, l)
		}
	}
	pat := patterns()[0]
	var order []string
	n := map[*library]int{}
	// Each library's k-th round decides (k+1)*1000 per second, but the
	// second round of the first library is disturbed: 10 per second.
	cells, err := runRounds(context.Background(), libs, pat, 1, 3, func(l *library) (result, error) {
		order = append(order, l.name+"/"+l.algo[:4])
		n[l]++
		ops := int64(n[l] * 1000)
		if l == libs[0] && n[l] == 2 {
			ops = 10
		}
		return result{ops: ops, allowed: ops, elapsed: time.Second, p99: time.Duration(n[l]) * time.Millisecond, mallocs: 7}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, r := range []int{0, 1, 2} {
		for k := range libs {
			i := k
			if r == 1 {
				i = len(libs) - 1 - k
			}
			want = append(want, libs[i].name+"/"+libs[i].algo[:4])
		}
	}
	if !slices.Equal(order, want) {
		t.Errorf("order = %v, want %v", order, want)
	}
	if len(cells) != len(libs) {
		t.Fatalf("%d cells, want %d", len(cells), len(libs))
	}
	c := cells[0]
	if got := c.res.opsPerSec(); got != 1000 { // rounds 1000, 10, 3000
		t.Errorf("median ops/s of the first library = %v, want 1000", got)
	}
	if got := cells[1].res.opsPerSec(); got != 2000 {
		t.Errorf("median ops/s of the second library = %v, want 2000", got)
	}
	if c.res.p99 != 2*time.Millisecond || c.res.ops != 4010 || c.res.mallocs != 21 || c.res.elapsed != 3*time.Second || len(c.rounds) != 3 {
		t.Errorf("first cell = %+v, want p99 2ms, 4010 decisions, 21 allocations over 3s, 3 rounds", c.res)
	}
}

// TestP99Rows judges the p99 rows against the fastest peer of a cell.
func TestP99Rows(t *testing.T) {
	byName := map[string]*library{}
	for _, l := range libraries() {
		if l.store == "redis" {
			byName[l.name] = l
		}
	}
	hot := patterns()[0]
	rep := &report{goroutines: []int{1, 16}, patterns: []*pattern{hot}}
	add := func(name string, g int, ops int64, p99 time.Duration) {
		rep.cells = append(rep.cells, cell{lib: byName[name], pat: hot, g: g, res: result{ops: ops, elapsed: time.Second, p99: p99}})
	}
	// c=1: ulule decides most, with a p99 of 150 µs; ratekit's 140 µs.
	add(nameRatekit, 1, 10000, 140*time.Microsecond)
	add(nameRedisRate, 1, 9000, 100*time.Microsecond)
	add(nameUlule, 1, 12000, 150*time.Microsecond)
	// c=16: redis_rate decides most, p99 1 ms; ratekit's 1.2 ms.
	add(nameRatekit, 16, 60000, 1200*time.Microsecond)
	add(nameRedisRate, 16, 70000, time.Millisecond)
	add(nameUlule, 16, 50000, 500*time.Microsecond)
	got := map[string]goalRow{}
	for _, g := range rep.p99Rows([]string{"hot"}) {
		got[g.name] = g
	}
	if g := got["Redis p99 latency, hot key, c=1"]; g.verdict != met || g.ratio != "0.93× "+nameUlule {
		t.Errorf("c=1 row = %+v, want met at 0.93× ulule", g)
	}
	if g := got["Redis p99 latency, hot key, c=16"]; g.verdict != notMet || g.ratio != "1.20× "+nameRedisRate {
		t.Errorf("c=16 row = %+v, want not met at 1.20× redis_rate", g)
	}
}

func TestParseDumpTotal(t *testing.T) {
	for _, tc := range []struct {
		dump string
		want int64
		ok   bool
	}{
		{"events: Ir\nfn=(1) x\n0 5\nsummary: 110830600\ntotals: 110830600\n", 110830600, true},
		{"events: Ir\ntotals: 42\n", 42, true},
		{"events: Ir\nfn=(1) x\n", 0, false},
		{"summary: lots\n", 0, false},
	} {
		got, err := parseDumpTotal(bufio.NewScanner(strings.NewReader(tc.dump)))
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseDumpTotal(%q) = %d, %v; want %d, ok %v", tc.dump, got, err, tc.want, tc.ok)
		}
	}
}

func TestInstrReport(t *testing.T) {
	got := instrReport([]instrCell{
		{lib: nameRatekit, pat: "10k", perDec: 65074},
		{lib: nameRedisRate, pat: "10k", perDec: 60211},
		{lib: nameUlule, pat: "hot", perDec: 25231},
	})
	for _, want := range []string{
		"| ratekit | 10k | 65,074 | 1.00× |",
		"| go-redis/redis_rate | 10k | 60,211 | 1.08× |",
		"| ulule/limiter | hot | 25,231 | – |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("instrReport lacks %q:\n%s", want, got)
		}
	}
}
