// Command compare runs ratekit and its peers side by side: the same
// goroutine counts, key patterns, Redis and run for every library, with
// redis-benchmark running EVALSHA of the classic sliding-window script for
// the ceiling. It judges every goal of issue 10 on the run's own numbers:
// Redis decisions per second and cost per decision, the memory store's
// ns/op and allocations, middleware overhead over a bare handler, Redis
// memory per key, and the denied flood. It lives in its own module so
// that the library's go.mod never depends on its competitors.
//
//	cd bench && go run .          # about 3 minutes
//	cd bench && go run . -quick   # under a minute
//
// It starts its own redis-server on a free loopback port (redis-server and
// redis-benchmark must be installed), prints progress on stderr and the
// tables on stdout, and writes results/results.md, results/throughput.svg
// and results/goals.svg. Every run is bounded in time and stops by itself.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// config is the run's parameters.
type config struct {
	quick      bool
	redisDur   time.Duration // measured time of one Redis-backed cell
	memDur     time.Duration // measured time of one in-memory cell
	ceilingDur time.Duration // time of one redis-benchmark run
	microTime  time.Duration // benchtime of one in-memory testing.Benchmark
	goroutines []int
	libs       string // comma-separated substrings; empty: all
	pats       string // comma-separated pattern names; empty: all
	out        string
	limit      time.Duration // hard bound of the whole run
	cpuProfile string        // file for a CPU profile of the run; "" for none
	rounds     int           // interleaved rounds of the one-goroutine Redis cells of the allowed patterns
	roundDur   time.Duration // measured time of one such round
	instr      bool          // count Redis's instructions per decision under callgrind instead
}

func main() {
	testing.Init() // testing.Benchmark reads the test.benchtime flag
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	cfg, err := parseFlags(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, cfg.limit)
	defer cancel()
	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	if cfg.instr {
		if err := instructions(ctx, cfg); err != nil {
			fmt.Fprintln(os.Stderr, "instructions:", err)
			return 1
		}
		return 0
	}
	if err := compare(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		return 1
	}
	return 0
}

func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	var cfg config
	var gs string
	fs.BoolVar(&cfg.quick, "quick", false, "short cells (under a minute in all) for a smoke run")
	fs.DurationVar(&cfg.redisDur, "d", 3*time.Second, "measured time of one Redis-backed cell")
	fs.DurationVar(&cfg.memDur, "dmem", 800*time.Millisecond, "measured time of one in-memory cell")
	fs.DurationVar(&cfg.ceilingDur, "dceiling", 3*time.Second, "time of one redis-benchmark run")
	fs.DurationVar(&cfg.microTime, "benchtime", 300*time.Millisecond, "benchtime of one in-memory or middleware testing.Benchmark")
	fs.StringVar(&gs, "goroutines", "1,16,64", "goroutine counts (and redis-benchmark clients)")
	fs.StringVar(&cfg.libs, "libs", "", "only libraries whose name contains one of these comma-separated words (\"middleware\" for the middleware section; the footprint and the hot-key sweep need \"ratekit\")")
	fs.StringVar(&cfg.pats, "patterns", "", "only these comma-separated patterns (hot, 10k, denied)")
	fs.StringVar(&cfg.out, "out", "results", "directory for results.md, throughput.svg and goals.svg")
	fs.DurationVar(&cfg.limit, "limit", 10*time.Minute, "hard bound of the whole run")
	fs.IntVar(&cfg.rounds, "rounds", 3, "interleaved rounds of each one-goroutine Redis cell of the hot and 10k patterns (medians reported); 1: one run as the other cells")
	fs.BoolVar(&cfg.instr, "instructions", false, "instead of the comparison: Redis's instructions per decision of each Redis-backed library under valgrind's callgrind (about 2 minutes; writes instructions.md; -libs and -patterns narrow it)")
	fs.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write a CPU profile of the run to this file (narrow the run with -libs, -patterns, -goroutines)")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if cfg.quick {
		cfg.redisDur, cfg.memDur, cfg.ceilingDur, cfg.microTime = 400*time.Millisecond, 150*time.Millisecond, 400*time.Millisecond, 50*time.Millisecond
	}
	if cfg.rounds < 1 || cfg.rounds > 20 {
		return cfg, fmt.Errorf("-rounds: %d is not within 1..20", cfg.rounds)
	}
	cfg.roundDur = cfg.redisDur
	if cfg.rounds > 1 {
		cfg.roundDur = max(cfg.redisDur/2, 200*time.Millisecond)
	}
	for _, f := range strings.Split(gs, ",") {
		g, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || g < 1 || g > 1024 {
			return cfg, fmt.Errorf("-goroutines: %q is not a count within 1..1024", f)
		}
		cfg.goroutines = append(cfg.goroutines, g)
	}
	return cfg, nil
}

// warmup is the unmeasured start of a cell: connections, script loads.
func warmup(d time.Duration) time.Duration { return min(d/5, 300*time.Millisecond) }

func selected(list, name string) bool {
	if list == "" {
		return true
	}
	for _, w := range strings.Split(list, ",") {
		if w = strings.TrimSpace(w); w != "" && strings.Contains(name, w) {
			return true
		}
	}
	return false
}

func compare(ctx context.Context, cfg config) error {
	begin := time.Now()
	load0 := loadAvg()
	srv, err := startRedis(ctx)
	if err != nil {
		return err
	}
	defer srv.stop()
	maxG := 0
	for _, g := range cfg.goroutines {
		maxG = max(maxG, g)
	}
	// One connection per goroutine, as redis-benchmark opens one per
	// client; ContextTimeoutEnabled as a ratekit deployment sets it.
	rdb := redis.NewClient(&redis.Options{Addr: srv.addr, PoolSize: maxG + 4, ContextTimeoutEnabled: true})
	defer rdb.Close()
	e := &env{rdb: rdb}
	defer e.close()
	redisVersion := "?"
	if info, err := rdb.InfoMap(ctx, "server").Result(); err == nil {
		redisVersion = info["Server"]["redis_version"]
	}

	var pats []*pattern
	for _, p := range patterns() {
		if selected(cfg.pats, p.name) {
			pats = append(pats, p)
		}
	}
	var libs []*library
	for _, l := range libraries() {
		if selected(cfg.libs, l.name) {
			libs = append(libs, l)
		}
	}
	_, benchErr := exec.LookPath("redis-benchmark")

	// The plan, for progress and the time estimate.
	type job struct {
		lib *library
		pat *pattern
		g   int
	}
	var jobs []job
	planned := time.Duration(0)
	for _, p := range pats {
		for _, l := range libs {
			for _, g := range cfg.goroutines {
				jobs = append(jobs, job{l, p, g})
				d := cfg.memDur
				switch {
				case cfg.rounds > 1 && interleaved(l, p, g):
					d = time.Duration(cfg.rounds) * (cfg.roundDur + warmup(cfg.roundDur))
				case l.store == "redis":
					d = cfg.redisDur
				}
				planned += d + warmup(d)
			}
		}
	}
	ceilRuns := []ceilingRun{}
	if benchErr == nil {
		for _, g := range cfg.goroutines {
			ceilRuns = append(ceilRuns, ceilingRun{clients: g, pipeline: 1})
		}
		ceilRuns = append(ceilRuns, ceilingRun{clients: maxG, pipeline: 16})
		rounds := 2
		if cfg.quick {
			rounds = 1
		}
		planned += time.Duration(rounds*len(ceilRuns)) * (cfg.ceilingDur + 300*time.Millisecond)
	}
	// The hot-key sweep, in-memory benchmarks (testing.Benchmark runs
	// about 1.5 benchtimes), middleware (four per case), footprint.
	planned += time.Duration(len(sweepWindows)) * (cfg.redisDur/2 + warmup(cfg.redisDur/2))
	planned += time.Duration(float64(3*2*4+4*len(middlewareCases()))*1.5*float64(cfg.microTime)) + 5*time.Second
	logf("redis-server %s on %s; %d cells, %d ceiling configurations; planned about %s (hard limit %s)",
		redisVersion, srv.addr, len(jobs), len(ceilRuns), planned.Round(time.Second), cfg.limit)

	rep := &report{goroutines: cfg.goroutines, patterns: pats}
	rep.header = []string{
		"date: " + begin.UTC().Format("2006-01-02 15:04 UTC"),
		fmt.Sprintf("machine: %s/%s, %d CPUs, GOMAXPROCS %d, %s; client and Redis share it", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version()),
		fmt.Sprintf("redis-server %s (no persistence, loopback), go-redis %s, one client with a pool of %d connections", redisVersion, depVersion("github.com/redis/go-redis/v9"), maxG+4),
		"competitors: " + competitorVersions(),
		"frameworks: " + frameworkVersions(),
		fmt.Sprintf("cells: %v measured per Redis-backed cell, %v per in-memory cell, after an unmeasured warm-up; latency sampled on every Redis decision and on 1 in 64 in-memory decisions; testing.Benchmark benchtime %v", cfg.redisDur, cfg.memDur, cfg.microTime),
		roundsLine(cfg),
		"ratekit on Redis: one RedisStore for the run (batching 64, the default), a limiter per pattern with default options but a 1 s store timeout (a fallback decision would not measure Redis; fallbacks count as errors)",
		"load average before the run: " + load0,
	}
	if benchErr != nil {
		rep.notes = append(rep.notes, "redis-benchmark not found: no ceiling was measured")
	}

	// 1. The ceiling, measured before the matrix and again after it; the
	// ratios use the higher of the two, so a machine that was busier
	// during one of them does not flatter the libraries.
	runCeilings := func(round string) {
		for i, cr := range ceilRuns {
			if ctx.Err() != nil {
				return
			}
			logf("[ceiling %s %d/%d] redis-benchmark EVALSHA -c %d -P %d ...", round, i+1, len(ceilRuns), cr.clients, cr.pipeline)
			rps := 0.0 // the rate of the round before, if any, sizes the run
			for _, c := range rep.ceilings {
				if c.ceilingRun == cr {
					rps = c.rps
				}
			}
			res, err := runCeiling(ctx, rdb, srv.port(), cr, cfg.ceilingDur, rps)
			if err != nil {
				rep.notes = append(rep.notes, fmt.Sprintf("ceiling -c %d -P %d (%s) failed: %v", cr.clients, cr.pipeline, round, err))
				logf("  failed: %v", err)
				continue
			}
			res.round = round
			rep.ceilings = append(rep.ceilings, res)
			logf("  %s ops/s, p50 %s, p99 %s, Redis %.1f µs per script call", fmtOps(res.rps), fmtDur(res.p50), fmtDur(res.p99), res.serverUsec)
		}
	}
	runCeilings("before")

	// The floor of one caller: a bare go-redis PING through the same
	// client, one goroutine, for a decision's client CPU to be judged
	// against (issue 21: at most PING's + 10 µs).
	if slices.Contains(cfg.goroutines, 1) && slices.ContainsFunc(libs, func(l *library) bool { return l.store == "redis" }) && ctx.Err() == nil {
		ping := func(ctx context.Context, _ string) (bool, error) { return true, rdb.Ping(ctx).Err() }
		res := measure(ctx, ping, []string{""}, 1, warmup(cfg.redisDur), cfg.redisDur, 1)
		rep.ping = &res
		logf("go-redis PING, G=1: %s ops/s, client CPU %.1f µs per call", fmtOps(res.opsPerSec()), res.clientCPUPerOp())
	}

	// 2. The matrix. The one-goroutine cells of the allowed Redis
	// patterns run in interleaved rounds (see runRounds); the others once.
	done := map[*pattern]bool{}
	for i, j := range jobs {
		if ctx.Err() != nil {
			break
		}
		if cfg.rounds > 1 && interleaved(j.lib, j.pat, j.g) {
			if done[j.pat] {
				continue
			}
			done[j.pat] = true
			var group []*library
			for _, k := range jobs {
				if k.pat == j.pat && k.g == j.g && interleaved(k.lib, k.pat, k.g) {
					group = append(group, k.lib)
				}
			}
			cells, err := runRounds(ctx, group, j.pat, j.g, cfg.rounds, func(l *library) (result, error) {
				return runCell(ctx, e, l, j.pat, j.g, cfg.roundDur)
			})
			if err != nil {
				return err
			}
			rep.cells = append(rep.cells, cells...)
			for _, c := range cells {
				logCell(begin, fmt.Sprintf("%d rounds", len(c.rounds)), c)
			}
			continue
		}
		d := cfg.memDur
		if j.lib.store == "redis" {
			d = cfg.redisDur
		}
		res, err := runCell(ctx, e, j.lib, j.pat, j.g, d)
		if err != nil {
			return err
		}
		c := cell{lib: j.lib, pat: j.pat, g: j.g, res: res}
		rep.cells = append(rep.cells, c)
		logCell(begin, fmt.Sprintf("%2d/%d", i+1, len(jobs)), c)
	}
	if err := rdb.FlushAll(ctx).Err(); err != nil && ctx.Err() == nil {
		return fmt.Errorf("FLUSHALL: %w", err)
	}

	// What bounds ratekit on one hot key: the same run with shorter
	// windows, so fewer live entries in its log.
	if selected(cfg.libs, "ratekit") && selected(cfg.pats, "hot") {
		sweep, err := runSweep(ctx, e, cfg.goroutines, cfg.redisDur/2)
		if err != nil {
			return err
		}
		rep.sweep = sweep
	}

	if !cfg.quick { // a quick run measures the ceiling once
		runCeilings("after")
	}

	// 3. In-memory ns/op and allocations.
	if ctx.Err() == nil {
		rep.micro = runMicro(ctx, e, libs, pats, cfg.microTime)
	}

	// 4. Middleware overhead over a bare handler.
	if ctx.Err() == nil && selected(cfg.libs, "middleware") {
		rep.middleware = runMiddleware(ctx, os.Stderr)
	}

	// 5. Redis footprint.
	if ctx.Err() == nil && selected(cfg.libs, "ratekit") {
		logf("footprint: MEMORY USAGE of sliding-log, sliding-buckets and the peers' keys ...")
		fps, err := measureFootprint(ctx, e, cfg.quick)
		if err != nil {
			rep.notes = append(rep.notes, "footprint failed: "+err.Error())
		}
		rep.footprints = fps
	}

	if err := ctx.Err(); err != nil {
		rep.notes = append(rep.notes, "the run was cut short: "+err.Error())
	}
	rep.header = append(rep.header, "load average after the run: "+loadAvg(), "wall time: "+time.Since(begin).Round(time.Second).String())

	if err := os.MkdirAll(cfg.out, 0o755); err != nil {
		return err
	}
	md := filepath.Join(cfg.out, "results.md")
	f, err := os.Create(md)
	if err != nil {
		return err
	}
	rep.writeMarkdown(f)
	if err := f.Close(); err != nil {
		return err
	}
	rep.writeMarkdown(os.Stdout)
	svg := filepath.Join(cfg.out, "throughput.svg")
	if err := rep.writeChart(svg); err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	goalsSVG := filepath.Join(cfg.out, "goals.svg")
	if err := rep.writeGoalsChart(goalsSVG); err != nil {
		return fmt.Errorf("goals chart: %w", err)
	}
	logf("wrote %s, %s and %s in %s", md, svg, goalsSVG, time.Since(begin).Round(time.Second))
	return nil
}

// interleaved reports whether the cell of lib on p at g goroutines runs
// in interleaved rounds: a Redis library at one goroutine on an allowed
// pattern, where the verdicts sit near 1.0×.
func interleaved(lib *library, p *pattern, g int) bool {
	return g == 1 && lib.store == "redis" && p.allowed
}

// roundsLine describes the interleaved rounds for the report's header.
func roundsLine(cfg config) string {
	if cfg.rounds <= 1 {
		return "one-goroutine cells: measured once, as the others"
	}
	return fmt.Sprintf("one-goroutine Redis cells of the allowed patterns: %d interleaved rounds of %v each (the libraries in turn, the order reversed every other round: A B C D, D C B A, ...); their ops/s, p50 and p99 are the medians of the rounds, their costs per decision those of all the rounds together",
		cfg.rounds, cfg.roundDur)
}

// runCell measures lib on p at g goroutines for d after a warm-up: on a
// flushed Redis with Redis's costs for a Redis library, the keys of a
// many-key pattern touched first.
func runCell(ctx context.Context, e *env, lib *library, p *pattern, g int, d time.Duration) (result, error) {
	sample := uint64(64)
	var probes []probe
	var rp *redisProbe
	if lib.store == "redis" {
		sample = 1
		if err := e.rdb.FlushAll(ctx).Err(); err != nil {
			return result{}, fmt.Errorf("FLUSHALL: %w", err)
		}
		// Each library's own measurement window: commandstats are
		// reset as it starts and read as it ends.
		rp = &redisProbe{rdb: e.rdb}
		probes = append(probes, rp)
	}
	allow, closeFn, err := lib.setup(e, p)
	if err != nil {
		return result{}, fmt.Errorf("%s (%s): %w", lib.name, lib.store, err)
	}
	defer closeFn()
	if len(p.keys) > 1 {
		if err := touchAll(ctx, allow, p.keys); err != nil {
			return result{}, fmt.Errorf("%s (%s) touching the keys of %s: %w", lib.name, lib.store, p.name, err)
		}
	}
	res := measure(ctx, allow, p.keys, g, warmup(d), d, sample, probes...)
	if rp != nil && ctx.Err() == nil {
		if rp.err != nil {
			return result{}, rp.err
		}
		res.redis = rp.result
	}
	return res, nil
}

// runRounds measures libs on p at g goroutines with run in rounds
// interleaved rounds: every library once a round, in the libraries' order
// in even rounds and the reverse in odd ones (A B C D, D C B A, A B C
// D), so that a drift of the machine's load over the rounds weighs on
// every library alike. Each cell merges its rounds (mergeRounds).
func runRounds(ctx context.Context, libs []*library, p *pattern, g, rounds int, run func(*library) (result, error)) ([]cell, error) {
	per := make([][]result, len(libs))
	for r := range rounds {
		for k := range libs {
			i := k
			if r%2 == 1 {
				i = len(libs) - 1 - k
			}
			if ctx.Err() != nil {
				break
			}
			res, err := run(libs[i])
			if err != nil {
				return nil, err
			}
			per[i] = append(per[i], res)
		}
	}
	cells := make([]cell, 0, len(libs))
	for i, l := range libs {
		if len(per[i]) == 0 {
			continue
		}
		cells = append(cells, cell{lib: l, pat: p, g: g, res: mergeRounds(per[i]), rounds: per[i]})
	}
	return cells, nil
}

// logCell prints a measured cell on stderr.
func logCell(begin time.Time, tag string, c cell) {
	res := c.res
	errs := ""
	if res.errs > 0 {
		errs = fmt.Sprintf(", %d ERRORS", res.errs)
	}
	extra := fmt.Sprintf("%5.1f allocs", res.allocsPerOp())
	if c.lib.store == "redis" {
		extra += fmt.Sprintf(", client CPU %.1f µs, Redis %.2f µs (CPU %.2f µs)/decision", res.clientCPUPerOp(), res.redisUsecPerOp(), res.redisCPUPerOp())
	}
	logf("[%s %s] %-22s %-6s %-6s G=%-3d %12s ops/s  p50 %-9s p99 %-9s admitted %5.1f%%  %s%s",
		tag, time.Since(begin).Round(time.Second), c.lib.name, c.lib.store, c.pat.name, c.g,
		fmtOps(res.opsPerSec()), fmtDur(res.p50), fmtDur(res.p99), 100*perOp(float64(res.allowed), res.ops), extra, errs)
}

// sweepWindows are the windows of the hot-key sweep.
var sweepWindows = []time.Duration{time.Millisecond, 10 * time.Millisecond, roomyWindow}

// runSweep measures ratekit on one hot key at 16 goroutines (or the most
// of the run's, if 16 is not among them) with the limit of the hot
// pattern and each of sweepWindows: the log holds about decisions/s ×
// window live entries.
func runSweep(ctx context.Context, e *env, goroutines []int, d time.Duration) ([]sweepPoint, error) {
	g := 0
	for _, n := range goroutines {
		if n == 16 {
			g = 16
			break
		}
		g = max(g, n)
	}
	var out []sweepPoint
	for _, w := range sweepWindows {
		if ctx.Err() != nil {
			break
		}
		p := &pattern{name: "sweep", keys: []string{"hot"}, limit: roomy, window: w, memWindow: w, allowed: true}
		if err := e.rdb.FlushAll(ctx).Err(); err != nil {
			return out, fmt.Errorf("FLUSHALL: %w", err)
		}
		allow, closeFn, err := setupRatekitRedis(e, p)
		if err != nil {
			return out, err
		}
		rp := &redisProbe{rdb: e.rdb}
		res := measure(ctx, allow, p.keys, g, warmup(d), d, 1, rp)
		closeFn()
		if ctx.Err() != nil {
			break
		}
		if rp.err != nil {
			return out, rp.err
		}
		res.redis = rp.result
		pt := sweepPoint{window: w, g: g, limit: roomy, res: res}
		out = append(out, pt)
		logf("sweep ratekit hot G=%d window %-6v %12s ops/s, about %6.0f live entries, Redis %.2f µs (CPU %.2f µs)/decision",
			g, w, fmtOps(res.opsPerSec()), pt.liveEntries(), res.redisUsecPerOp(), res.redisCPUPerOp())
	}
	return out, e.rdb.FlushAll(ctx).Err()
}

// runMicro measures serial and parallel ns/op and allocations of every
// in-memory library on every pattern with testing.Benchmark.
func runMicro(ctx context.Context, e *env, libs []*library, pats []*pattern, benchtime time.Duration) []microResult {
	if err := flag.Set("test.benchtime", benchtime.String()); err != nil {
		logf("micro: %v", err)
		return nil
	}
	var out []microResult
	for _, p := range pats {
		for _, l := range libs {
			if l.store != "memory" {
				continue
			}
			for _, parallel := range []bool{false, true} {
				if ctx.Err() != nil {
					return out
				}
				allow, closeFn, err := l.setup(e, p)
				if err != nil {
					logf("micro %s: %v", l.name, err)
					continue
				}
				keys := p.keys
				if err := touchAll(ctx, allow, keys); err != nil {
					logf("micro %s: %v", l.name, err)
					closeFn()
					continue
				}
				var ops, allowed atomic.Int64
				br := testing.Benchmark(func(b *testing.B) {
					b.ReportAllocs()
					if !parallel {
						i, n := 0, int64(0)
						for b.Loop() {
							if ok, _ := allow(ctx, keys[i%len(keys)]); ok {
								n++
							}
							i++
						}
						ops.Add(int64(i))
						allowed.Add(n)
						return
					}
					// Each goroutine starts at a key of its own, so that
					// on many keys they do not ask for the same key in
					// lockstep (one key's lock between them).
					var seq atomic.Int64
					b.RunParallel(func(pb *testing.PB) {
						i, k, n := int64(0), int(seq.Add(1))*5003, int64(0)
						for pb.Next() {
							if ok, _ := allow(ctx, keys[k%len(keys)]); ok {
								n++
							}
							k += 7919
							i++
						}
						ops.Add(i)
						allowed.Add(n)
					})
				})
				closeFn()
				m := microResult{lib: l, pat: p, parallel: parallel, allocs: br.AllocsPerOp(), bytes: br.AllocedBytesPerOp(),
					nsPerOp: nsPerOp(br), ops: ops.Load(), allowed: allowed.Load()}
				out = append(out, m)
				logf("micro %-22s %-6s parallel=%-5v %8.1f ns/op %3d allocs/op admitted %5.1f%%", l.name, p.name, parallel, m.nsPerOp, m.allocs,
					100*perOp(float64(m.allowed), m.ops))
			}
		}
	}
	return out
}

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", a...)
}

// loadAvg returns the 1, 5 and 15 minute load averages, or "?".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// depVersion returns the version of module path in this binary.
func depVersion(path string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == path {
				return d.Version
			}
		}
	}
	return "?"
}

func competitorVersions() string {
	return versions("github.com/go-redis/redis_rate/v10", "github.com/ulule/limiter/v3", "github.com/sethvargo/go-limiter", "golang.org/x/time",
		"github.com/go-chi/httprate", "github.com/didip/tollbooth/v7")
}

func frameworkVersions() string {
	return versions("github.com/gin-gonic/gin", "github.com/labstack/echo/v4", "github.com/gofiber/fiber/v2", "google.golang.org/grpc")
}

func versions(modules ...string) string {
	var s []string
	for _, m := range modules {
		s = append(s, m+" "+depVersion(m))
	}
	return strings.Join(s, ", ")
}
