package main

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
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
	lib *library
	pat *pattern
	g   int
	res result
}

// microResult is one in-memory testing.Benchmark.
type microResult struct {
	lib      *library
	pat      *pattern
	parallel bool
	nsPerOp  float64
	allocs   int64
	bytes    int64
}

// report is everything one run produced.
type report struct {
	header     []string // lines describing the machine and the run
	ceilings   []ceilingResult
	cells      []cell
	micro      []microResult
	footprints []footprint
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

// writeMarkdown writes the results as Markdown tables.
func (r *report) writeMarkdown(w io.Writer) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("# ratekit comparison results\n\n")
	for _, h := range r.header {
		p("- %s\n", h)
	}
	p("\n")
	if len(r.ceilings) > 0 {
		p("## Ceiling: redis-benchmark, EVALSHA of the classic sliding-window script, one hot key\n\n")
		p("Measured before and after the libraries; the ratios below use the higher of the two.\n\n")
		p("| clients | pipeline | round | ops/s | p50 | p99 | Redis µs/call |\n|---:|---:|---|---:|---:|---:|---:|\n")
		for _, c := range r.ceilings {
			p("| %d | %d | %s | %s | %s | %s | %s |\n", c.clients, c.pipeline, c.round, fmtOps(c.rps), fmtDur(c.p50), fmtDur(c.p99), fmtUsec(c.serverUsec))
		}
		p("\n")
	}
	for _, pat := range r.patterns {
		p("## %s\n\n", pat.title)
		p("| library | store | algorithm | goroutines | ops/s | p50 | p99 | × ceiling | × ratekit | admitted | errors | Redis µs/call |\n")
		p("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, c := range r.cells {
			if c.pat != pat {
				continue
			}
			ops := c.res.opsPerSec()
			admitted := "–"
			if c.res.ops > 0 {
				admitted = fmt.Sprintf("%.1f%%", 100*float64(c.res.allowed)/float64(c.res.ops))
			}
			p("| %s | %s | %s | %d | %s | %s | %s | %s | %s | %s | %d | %s |\n",
				c.lib.name, c.lib.store, c.lib.algo, c.g, fmtOps(ops), fmtDur(c.res.p50), fmtDur(c.res.p99),
				fmtRatio(ops, r.ceilingAt(c.g)), fmtRatio(ops, r.ratekitOps(c.lib.store, pat, c.g)), admitted, c.res.errs, fmtUsec(c.res.serverUsec))
		}
		p("\n")
	}
	if len(r.micro) > 0 {
		p("## In-memory decisions: ns/op and allocations (testing.Benchmark)\n\n")
		p("| library | pattern | goroutines | ns/op | allocs/op | B/op | × x/time/rate | × ratekit |\n")
		p("|---|---|---|---:|---:|---:|---:|---:|\n")
		for _, m := range r.micro {
			mode := "1 (serial)"
			if m.parallel {
				mode = "GOMAXPROCS (parallel)"
			}
			p("| %s | %s | %s | %.1f | %d | %d | %s | %s |\n", m.lib.name, m.pat.name, mode, m.nsPerOp, m.allocs, m.bytes,
				fmtRatio(m.nsPerOp, r.microNs("x/time/rate", m.pat, m.parallel)), fmtRatio(m.nsPerOp, r.microNsRatekit(m.pat, m.parallel)))
		}
		p("\nns/op ratios: below 1 is faster than the reference.\n\n")
	}
	if len(r.footprints) > 0 {
		p("## Redis memory per key (MEMORY USAGE … SAMPLES 0)\n\n")
		p("| key | bytes | bytes per entry or bucket |\n|---|---:|---:|\n")
		for _, f := range r.footprints {
			p("| %s | %d | %.1f |\n", f.what, f.bytes, f.perEntry)
		}
		p("\n")
	}
	p("Redis µs/call is INFO commandstats' execution time per script call (EVAL/EVALSHA), reset before each cell: the server's own cost of one decision, without network I/O. Redis runs scripts on one thread, so 10⁶ divided by it bounds a cell's decisions per second.\n\n")
	for _, n := range r.notes {
		p("- %s\n", n)
	}
}

func (r *report) microNs(name string, pat *pattern, parallel bool) float64 {
	for _, m := range r.micro {
		if m.lib.name == name && m.pat == pat && m.parallel == parallel {
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
