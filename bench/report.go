package main

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// cell is one measured point of the matrix.
type cell struct {
	lib    *library
	pat    *pattern
	g      int
	res    result   // the cell's result; for a cell of rounds, mergeRounds of them
	rounds []result // the interleaved rounds, in the order run; nil: measured once
}

// microResult is one in-memory testing.Benchmark.
type microResult struct {
	lib          *library
	pat          *pattern
	parallel     bool
	nsPerOp      float64
	allocs       int64
	bytes        int64
	ops, allowed int64 // decisions made in all the benchmark's runs, and of them admitted
}

// sweepPoint is ratekit on one hot key with one window.
type sweepPoint struct {
	window time.Duration
	g      int
	limit  int64
	res    result
}

// liveEntries estimates the entries of the key's log: the admissions of
// one window, at most the limit.
func (s sweepPoint) liveEntries() float64 {
	return math.Min(float64(s.limit), s.res.opsPerSec()*s.window.Seconds())
}

// report is everything one run produced.
type report struct {
	header     []string // lines describing the machine and the run
	ceilings   []ceilingResult
	cells      []cell
	micro      []microResult
	footprints []footprint
	middleware []mwResult
	sweep      []sweepPoint
	ping       *result // a bare go-redis PING at one goroutine; nil: not run
	goroutines []int
	patterns   []*pattern
	notes      []string
}

// ceilingAt returns the unpipelined ceiling at c clients, the higher of
// its rounds; 0 if unknown.
func (r *report) ceilingAt(c int) float64 {
	best := 0.0
	for _, x := range r.ceilings {
		if x.clients == c && x.pipeline == 1 {
			best = math.Max(best, x.rps)
		}
	}
	return best
}

// ratekitOps returns ratekit's throughput on store for p at g goroutines.
func (r *report) ratekitOps(store string, p *pattern, g int) float64 {
	for _, c := range r.cells {
		if c.lib.ratekit && c.lib.store == store && c.pat == p && c.g == g {
			return c.res.opsPerSec()
		}
	}
	return 0
}

// writeMarkdown writes the results as Markdown tables: the goals first,
// then what they were computed from.
func (r *report) writeMarkdown(w io.Writer) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("# ratekit comparison results\n\n")
	for _, h := range r.header {
		p("- %s\n", h)
	}
	p("\n")
	r.writeGoals(w)
	if len(r.ceilings) > 0 {
		p("## Ceiling: redis-benchmark, EVALSHA of the classic sliding-window script, one hot key\n\n")
		p("The classic ZSET script (ZREMRANGEBYSCORE, ZCARD, ZADD, PEXPIRE), one call per decision, no pipelining, with the hot pattern's limit and window; measured before and after the libraries (a quick run: before only), the ratios use the higher of the two.\n\n")
		p("| clients | pipeline | round | ops/s | p50 | p99 | Redis µs/call |\n|---:|---:|---|---:|---:|---:|---:|\n")
		for _, c := range r.ceilings {
			p("| %d | %d | %s | %s | %s | %s | %s |\n", c.clients, c.pipeline, c.round, fmtOps(c.rps), fmtDur(c.p50), fmtDur(c.p99), fmtUsec(c.serverUsec))
		}
		p("\n")
	}
	for _, pat := range r.patterns {
		p("## %s\n\n", pat.title)
		p("| library | store | algorithm | goroutines | ops/s | p50 | p99 | × ceiling | × ratekit | admitted | errors | allocs/decision | client CPU µs/decision | Redis µs/decision | Redis CPU µs/decision | script calls/decision |\n")
		p("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, c := range r.cells {
			if c.pat != pat {
				continue
			}
			ops := c.res.opsPerSec()
			admitted := "–"
			if c.res.ops > 0 {
				admitted = fmt.Sprintf("%.1f%%", 100*float64(c.res.allowed)/float64(c.res.ops))
			}
			client, usec, cpu, calls := "–", "–", "–", "–"
			if c.lib.store == "redis" && c.res.ops > 0 {
				client = fmt.Sprintf("%.1f", c.res.clientCPUPerOp())
				usec, cpu, calls = fmt.Sprintf("%.2f", c.res.redisUsecPerOp()), fmt.Sprintf("%.2f", c.res.redisCPUPerOp()), fmt.Sprintf("%.3f", c.res.callsPerOp())
			}
			p("| %s | %s | %s | %d | %s | %s | %s | %s | %s | %s | %d | %.1f | %s | %s | %s | %s |\n",
				c.lib.name, c.lib.store, c.lib.algo, c.g, fmtOps(ops), fmtDur(c.res.p50), fmtDur(c.res.p99),
				fmtRatio(ops, r.ceilingAt(c.g)), fmtRatio(ops, r.ratekitOps(c.lib.store, pat, c.g)), admitted, c.res.errs,
				c.res.allocsPerOp(), client, usec, cpu, calls)
		}
		p("\n")
	}
	p("allocs/decision: heap allocations of the whole process (runtime.MemStats) over the measured window, divided by its decisions: the library's client work, since the harness's loop allocates nothing. ")
	p("client CPU µs/decision: the harness process's user + system CPU time (getrusage) over the same window, divided by its decisions: the library's client work, its I/O system calls and the Go runtime's, and the harness's loop. ")
	p("Redis µs/decision: INFO commandstats execution time of every command the library sent (scripts and functions included; the harness's INFO and CONFIG left out), reset at the start of the measured window, divided by its decisions; it leaves out reading and writing the connections. ")
	p("Redis CPU µs/decision: the Redis process's user + system CPU time (INFO cpu) over the same window, divided by its decisions: execution, network I/O and all. ")
	p("script calls/decision: FCALL and EVALSHA calls per decision, below 1 when one call decides a batch.\n\n")
	r.writeRounds(p)
	r.writeOneCaller(p)
	if len(r.sweep) > 0 {
		p("## What bounds ratekit on one hot key: the live entries of its log\n\n")
		p("ratekit alone on the hot key, limit %s, with shorter windows than the hot pattern's: its log holds about decisions/s × window entries (at most the limit).\n\n", fmtOps(float64(r.sweep[0].limit)))
		p("| window | goroutines | ops/s | live entries (about) | allocs/decision | Redis µs/decision | Redis CPU µs/decision | script calls/decision | admitted |\n")
		p("|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, s := range r.sweep {
			p("| %v | %d | %s | %s | %.1f | %.2f | %.2f | %.3f | %.1f%% |\n", s.window, s.g, fmtOps(s.res.opsPerSec()), fmtOps(s.liveEntries()),
				s.res.allocsPerOp(), s.res.redisUsecPerOp(), s.res.redisCPUPerOp(), s.res.callsPerOp(), 100*perOp(float64(s.res.allowed), s.res.ops))
		}
		p("\n")
	}
	if len(r.micro) > 0 {
		p("## In-memory decisions: ns/op and allocations (testing.Benchmark)\n\n")
		p("| library | pattern | goroutines | ns/op | allocs/op | B/op | admitted | × x/time/rate | × ratekit |\n")
		p("|---|---|---|---:|---:|---:|---:|---:|---:|\n")
		for _, m := range r.micro {
			mode := "1 (serial)"
			if m.parallel {
				mode = "GOMAXPROCS (RunParallel)"
			}
			admitted := "–"
			if m.ops > 0 {
				admitted = fmt.Sprintf("%.1f%%", 100*float64(m.allowed)/float64(m.ops))
			}
			p("| %s | %s | %s | %.1f | %d | %d | %s | %s | %s |\n", m.lib.name, m.pat.name, mode, m.nsPerOp, m.allocs, m.bytes, admitted,
				fmtRatio(m.nsPerOp, r.microNs(nameXRate, m.pat, m.parallel)), fmtRatio(m.nsPerOp, r.microNsRatekit(m.pat, m.parallel)))
		}
		p("\nns/op ratios: below 1 is faster than the reference.\n\n")
	}
	if len(r.middleware) > 0 {
		p("## Middleware: cost per allowed request over the bare handler (testing.Benchmark)\n\n")
		p("A trivial handler served bare and behind the limiter, in this process, on one reused cheap writer (net/http, gin, echo), one reused fasthttp context (fiber), or a direct call with a server's context (gRPC). In-memory store, limit 100,000 per 1 ms (never reached), one client address; ratekit with default options (X-RateLimit headers on). Each side is the lower of two rounds.\n\n")
		p("| middleware | plugs into | bare ns/op | wrapped ns/op | overhead ns | bare allocs | wrapped allocs | overhead allocs | overhead B | note |\n")
		p("|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
		for _, m := range r.middleware {
			if math.IsInf(m.bareNs, 0) {
				p("| %s | %s | – | – | – | – | – | – | – | %s |\n", m.name, m.framework, m.failed)
				continue
			}
			p("| %s | %s | %.1f | %.1f | %+.1f | %d | %d | %+d | %+d | %s |\n", m.name, m.framework, m.bareNs, m.wrappedNs, m.overheadNs(),
				m.bareAllocs, m.allocs, m.overheadAllocs(), m.overheadBytes(), m.failed)
		}
		p("\n")
	}
	if len(r.footprints) > 0 {
		p("## Redis memory per limited key (MEMORY USAGE … SAMPLES 0)\n\n")
		p("Summed over every Redis key the limited key left. A SlidingLog key is filled with one admission per request from 16 goroutines, as in service (Redis grows the string by APPEND, so it may hold spare room).\n\n")
		p("| key | Redis keys | bytes | bytes per admission or bucket |\n|---|---:|---:|---:|\n")
		for _, f := range r.footprints {
			per := "–"
			if f.entries > 0 {
				per = fmt.Sprintf("%.1f", f.perEntry)
			}
			p("| %s | %d | %d | %s |\n", f.what, f.keys, f.bytes, per)
		}
		p("\n")
	}
	for _, n := range append(r.notes, r.offPathNotes()...) {
		p("- %s\n", n)
	}
}

// offPathNotes names the cells and benchmarks of allowed patterns that
// were not all admitted: they measured the denied path instead.
func (r *report) offPathNotes() []string {
	var off []string
	seen := map[string]bool{}
	for _, c := range r.cells {
		if c.pat.allowed && c.res.ops > 0 && c.res.allowed < c.res.ops*99/100 {
			off = append(off, fmt.Sprintf("%s (%s) %s at %d goroutines: %.1f%% admitted", c.lib.name, c.lib.store, c.pat.name, c.g, 100*float64(c.res.allowed)/float64(c.res.ops)))
			seen[c.lib.name] = true
		}
	}
	for _, m := range r.micro {
		if m.pat.allowed && m.ops > 0 && m.allowed < m.ops*99/100 {
			off = append(off, fmt.Sprintf("%s %s benchmark (parallel %v): %.1f%% admitted", m.lib.name, m.pat.name, m.parallel, 100*float64(m.allowed)/float64(m.ops)))
			seen[m.lib.name] = true
		}
	}
	if len(off) == 0 {
		return nil
	}
	notes := []string{"Not on the allowed path although the limit was never reached by the load: " + strings.Join(off, "; ") + ". These measure that library's denied path."}
	if seen[nameSethvargo] {
		notes = append(notes, "sethvargo/go-limiter v0.7.1 refills a bucket to (intervals elapsed) × (interval in ns ÷ tokens) tokens, at most tokens: 100,000 per 1 ms refills 10 tokens per ms, so it admits its configured rate only where the interval in ns is at least tokens².")
	}
	return notes
}

// writeGoals writes the goals table.
func (r *report) writeGoals(w io.Writer) {
	rows := r.goals()
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("## The goals of issue 10, judged on this run\n\n")
	nMet, nNot := 0, 0
	for _, g := range rows {
		switch g.verdict {
		case met:
			nMet++
		case notMet:
			nNot++
		}
	}
	p("%d met, %d not met, %d not measured. Each ratio compares ratekit with what was measured in this run; the sections below hold the numbers. c: goroutines driving the library (for the ceiling, redis-benchmark clients).\n\n", nMet, nNot, len(rows)-nMet-nNot)
	p("| # | goal | ratekit | peers (same run) | ratio | target | verdict |\n|---:|---|---|---|---|---|---|\n")
	for _, g := range rows {
		p("| %d | %s | %s | %s | %s | %s | %s |\n", g.goal, g.name, orDash(g.value), orDash(g.peers), orDash(g.ratio), g.target, g.verdict)
	}
	p("\ngoals.svg draws each row's attainment, 1 at the target and met from 1 up: the ratio ÷ the target for at-least goals, the target ÷ the value for at-most goals, 1 ÷ (1 + allocations) for zero-allocation goals, and for a middleware the lesser of its time and allocation attainments.\n")
	p("\nGoal 6 also keeps exactness across instances and on Cluster, retry safety, the timeout and every failure policy: the test suite checks those, not this run.\n\n")
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

func (r *report) microNs(name string, pat *pattern, parallel bool) float64 {
	for _, m := range r.micro {
		if !m.lib.ratekit && m.lib.name == name && m.pat == pat && m.parallel == parallel {
			return m.nsPerOp
		}
	}
	return 0
}

func (r *report) microNsRatekit(pat *pattern, parallel bool) float64 {
	for _, m := range r.micro {
		if m.lib.ratekit && m.pat == pat && m.parallel == parallel {
			return m.nsPerOp
		}
	}
	return 0
}

// fmtOps formats a throughput with thousands separators.
func fmtOps(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// fmtDur formats a latency in µs or ms with three significant digits.
func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "–"
	case d < time.Microsecond:
		return fmt.Sprintf("%d ns", d.Nanoseconds())
	case d < time.Millisecond:
		return fmt.Sprintf("%.3g µs", float64(d)/float64(time.Microsecond))
	}
	return fmt.Sprintf("%.3g ms", float64(d)/float64(time.Millisecond))
}

// fmtUsec formats Redis's execution time per script call.
func fmtUsec(v float64) string {
	if v <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f", v)
}

// fmtRatio formats v/ref, or "–" when ref is unknown.
func fmtRatio(v, ref float64) string {
	if ref <= 0 || math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.2f×", v/ref)
}

// writeChart draws throughput against concurrency, one panel per pattern,
// log-log on one shared scale, with the unpipelined ceiling dashed in
// each panel. A library keeps its colour in both stores; Redis-backed
// lines are solid, in-memory ones dashed.
func (r *report) writeChart(path string) error {
	const (
		panelW  = 4.3 * vg.Inch
		height  = 4.8 * vg.Inch
		legendW = 2.9 * vg.Inch
	)
	width := panelW*vg.Length(len(r.patterns)) + legendW
	lo, hi := math.Inf(1), 0.0
	for _, c := range r.cells {
		if v := c.res.opsPerSec(); v > 0 {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	for _, c := range r.ceilings {
		lo, hi = math.Min(lo, c.rps), math.Max(hi, c.rps)
	}
	if hi == 0 {
		return nil // nothing measured
	}
	lo = math.Pow(10, math.Floor(math.Log10(lo)))
	hi = math.Pow(10, math.Ceil(math.Log10(hi)))

	colors := map[string]color.Color{}
	colorOf := func(name string) color.Color {
		if c, ok := colors[name]; ok {
			return c
		}
		c := plotutil.Color(len(colors))
		colors[name] = c
		return c
	}
	legend := plot.NewLegend()
	legend.Top, legend.Left = true, true
	legend.TextStyle.Font.Size = vg.Points(9)
	var plots []*plot.Plot
	for i, pat := range r.patterns {
		p := plot.New()
		p.Title.Text = pat.title
		p.Title.TextStyle.Font.Size = vg.Points(10)
		p.X.Label.Text = "goroutines (redis-benchmark: clients)"
		p.Y.Label.Text = "decisions per second"
		p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
		p.Y.Min, p.Y.Max = lo, hi
		p.Y.Tick.Marker = decadeTicks{}
		var ticks []plot.Tick
		for _, g := range r.goroutines {
			ticks = append(ticks, plot.Tick{Value: float64(g), Label: fmt.Sprint(g)})
		}
		p.X.Tick.Marker = plot.ConstantTicks(ticks)
		if gmin, gmax := slices.Min(r.goroutines), slices.Max(r.goroutines); gmin == gmax {
			// One goroutine count: a log axis needs a range around it.
			p.X.Min, p.X.Max = float64(gmin)/2, float64(gmax)*2
		}
		p.Add(plotter.NewGrid())

		add := func(name string, pts plotter.XYs, col color.Color, dashes []vg.Length, shape int) error {
			if len(pts) == 0 {
				return nil
			}
			line, points, err := plotter.NewLinePoints(pts)
			if err != nil {
				return err
			}
			line.Color, line.Width, line.Dashes = col, vg.Points(1.6), dashes
			points.Color, points.Shape = col, plotutil.Shape(shape)
			p.Add(line, points)
			if i == 0 {
				legend.Add(name, line, points)
			}
			return nil
		}
		var ceil plotter.XYs
		for _, g := range r.goroutines {
			if c := r.ceilingAt(g); c > 0 {
				ceil = append(ceil, plotter.XY{X: float64(g), Y: c})
			}
		}
		if err := add("EVALSHA ceiling (redis-benchmark)", ceil, color.Black, []vg.Length{vg.Points(5), vg.Points(3)}, 1); err != nil {
			return err
		}
		for _, lib := range libraryOrder(r.cells) {
			var pts plotter.XYs
			for _, c := range r.cells {
				if c.lib == lib && c.pat == pat && c.res.opsPerSec() > 0 {
					pts = append(pts, plotter.XY{X: float64(c.g), Y: c.res.opsPerSec()})
				}
			}
			var dashes []vg.Length
			shape := 0
			if lib.store == "memory" {
				dashes, shape = []vg.Length{vg.Points(2), vg.Points(2)}, 2
			}
			if err := add(lib.name+" ("+lib.store+")", pts, colorOf(lib.name), dashes, shape); err != nil {
				return err
			}
		}
		plots = append(plots, p)
	}
	c := vgsvg.New(width, height)
	dc := draw.New(c)
	area := draw.Crop(dc, 0, -legendW, 0, 0)
	tiles := draw.Tiles{Rows: 1, Cols: len(plots), PadX: vg.Millimeter * 6, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align([][]*plot.Plot{plots}, tiles, area)
	for j, p := range plots {
		p.Draw(canvases[0][j])
	}
	legend.Draw(draw.Crop(dc, width-legendW+vg.Millimeter*3, 0, 0, -vg.Millimeter*10))
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// decadeTicks labels powers of ten (10k, 100k, 1M) with minor ticks at
// 2..9 times each.
type decadeTicks struct{}

// Ticks implements plot.Ticker.
func (decadeTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for d := math.Pow(10, math.Floor(math.Log10(lo))); d <= hi; d *= 10 {
		for m := 1.0; m < 10; m++ {
			v := d * m
			if v < lo*0.999 || v > hi*1.001 {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 {
				t.Label = shortCount(v)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}

// shortCount formats 10000 as 10k and 1e6 as 1M.
func shortCount(v float64) string {
	switch {
	case v >= 1e9:
		return fmt.Sprintf("%gG", v/1e9)
	case v >= 1e6:
		return fmt.Sprintf("%gM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%gk", v/1e3)
	}
	return fmt.Sprintf("%g", v)
}

// libraryOrder returns the libraries of cells in first-seen order.
func libraryOrder(cells []cell) []*library {
	var out []*library
	seen := map[*library]bool{}
	for _, c := range cells {
		if !seen[c.lib] {
			seen[c.lib] = true
			out = append(out, c.lib)
		}
	}
	return out
}

// writeGoalsChart draws every measured goal row's attainment (its score:
// 1 is the target, right of it is met) on a log scale, met rows in green
// and the others in red, as an SVG file.
func (r *report) writeGoalsChart(path string) error {
	p, w, h, err := r.goalsPlot()
	if err != nil || p == nil {
		return err
	}
	c := vgsvg.New(w, h)
	drawPadded(p, c)
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// drawPadded draws p on c with a margin, so that no label touches the
// edge.
func drawPadded(p *plot.Plot, c vg.CanvasSizer) {
	m := 4 * vg.Millimeter
	p.Draw(draw.Crop(draw.New(c), m, -m, m, -m))
}

// goalsPlot builds the goals chart and its size; nil if no goal was
// measured.
func (r *report) goalsPlot() (*plot.Plot, vg.Length, vg.Length, error) {
	var rows []goalRow
	for _, g := range r.goals() {
		if g.verdict != unknown {
			rows = append(rows, g)
		}
	}
	if len(rows) == 0 {
		return nil, 0, 0, nil
	}
	const lo, hi = 0.01, 100.0
	p := plot.New()
	p.Title.Text = "issue 10 goals: attainment in this run (1 = the target; right of the line: met)"
	p.Title.TextStyle.Font.Size = vg.Points(11)
	p.X.Label.Text = "attainment (see results.md)"
	p.X.Scale = plot.LogScale{}
	p.X.Min, p.X.Max = lo, hi
	p.X.Tick.Marker = decadeTicks{}
	p.Add(plotter.NewGrid())
	labels := make([]string, len(rows))
	var good, bad plotter.XYs
	for i, g := range rows {
		// The first goal at the top.
		y := float64(len(rows) - 1 - i)
		labels[len(rows)-1-i] = fmt.Sprintf("%d. %s", g.goal, g.name)
		pt := plotter.XY{X: math.Min(math.Max(g.score, lo), hi), Y: y}
		if g.verdict == met {
			good = append(good, pt)
		} else {
			bad = append(bad, pt)
		}
	}
	p.NominalY(labels...)
	p.Y.Tick.Label.Font.Size = vg.Points(8)
	target, err := plotter.NewLine(plotter.XYs{{X: 1, Y: -0.5}, {X: 1, Y: float64(len(rows)) - 0.5}})
	if err != nil {
		return nil, 0, 0, err
	}
	target.Color, target.Width, target.Dashes = color.Black, vg.Points(1), []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(target)
	for _, s := range []struct {
		pts plotter.XYs
		col color.Color
	}{{good, color.RGBA{G: 140, A: 255}}, {bad, color.RGBA{R: 200, A: 255}}} {
		if len(s.pts) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(s.pts)
		if err != nil {
			return nil, 0, 0, err
		}
		sc.Color, sc.Radius, sc.Shape = s.col, vg.Points(4), draw.CircleGlyph{}
		p.Add(sc)
	}
	return p, 10.5 * vg.Inch, vg.Length(len(rows))*0.24*vg.Inch + 1.5*vg.Inch, nil
}

// writeOneCaller writes the client CPU of a decision at one goroutine
// against a bare go-redis PING through the same client (issue 21: at
// most PING's + 10 µs).
func (r *report) writeOneCaller(p func(format string, a ...any)) {
	if r.ping == nil || r.ping.ops == 0 {
		return
	}
	ping := r.ping.clientCPUPerOp()
	p("## One caller: client CPU per decision against a bare go-redis call\n\n")
	p("A go-redis `PING` through the same client, one goroutine: %s calls/s, %.1f µs of client CPU per call. ", fmtOps(r.ping.opsPerSec()), ping)
	p("Every library pays one round trip per decision at one goroutine; what it adds on the client is its CPU per decision over PING's.\n\n")
	p("| library | pattern | ops/s | client CPU µs/decision | over PING | goal (ratekit: ≤ PING + %.0f µs) |\n|---|---|---:|---:|---:|---|\n", goalOneCallerUs)
	for _, pat := range r.patterns {
		for _, c := range r.cells {
			if c.pat != pat || !pat.allowed || c.g != 1 || c.lib.store != "redis" || c.res.ops == 0 {
				continue
			}
			v := c.res.clientCPUPerOp()
			goal := "–"
			if c.lib.name == nameRatekit {
				goal = verdictOf(atMost(v, ping+goalOneCallerUs)).String()
			}
			p("| %s | %s | %s | %.1f | %+.1f µs | %s |\n", c.lib.name, pat.name, fmtOps(c.res.opsPerSec()), v, v-ping, goal)
		}
	}
	p("\n")
}

// writeRounds writes the interleaved rounds of the cells that ran in
// rounds: each round's decisions/s and p99, in the order run, beside the
// medians the cell reports.
func (r *report) writeRounds(p func(format string, a ...any)) {
	var cells []cell
	for _, c := range r.cells {
		if len(c.rounds) > 0 {
			cells = append(cells, c)
		}
	}
	if len(cells) == 0 {
		return
	}
	p("## One goroutine: interleaved rounds\n\n")
	p("Each one-goroutine Redis cell of the allowed patterns ran in %d rounds, the libraries in turn and the order reversed every other round, so that a verdict near 1.0× is not decided by when a library ran. The tables above report the medians.\n\n", len(cells[0].rounds))
	p("| library | pattern | ops/s by round | median ops/s | × ratekit (median) | p99 by round | median p99 |\n|---|---|---|---:|---:|---|---:|\n")
	for _, c := range cells {
		var ops, p99 []string
		for _, rd := range c.rounds {
			ops = append(ops, fmtOps(rd.opsPerSec()))
			p99 = append(p99, fmtDur(rd.p99))
		}
		p("| %s | %s | %s | %s | %s | %s | %s |\n", c.lib.name, c.pat.name, strings.Join(ops, ", "), fmtOps(c.res.opsPerSec()),
			fmtRatio(c.res.opsPerSec(), r.ratekitOps(c.lib.store, c.pat, c.g)), strings.Join(p99, ", "), fmtDur(c.res.p99))
	}
	p("\n")
}
