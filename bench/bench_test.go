package main

import (
	"context"
	"strings"
	"testing"
	"time"
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
	if r.ops == 0 || r.allowed != r.ops || r.errs != 0 || r.elapsed < 50*time.Millisecond || r.p50 <= 0 {
		t.Errorf("measure = %+v, want some admitted decisions with latencies over at least 50ms", r)
	}
}

// TestReport writes the Markdown and the chart of a small fake run.
func TestReport(t *testing.T) {
	pats := patterns()[:1]
	libs := libraries()
	rep := &report{goroutines: []int{1, 16}, patterns: pats,
		ceilings: []ceilingResult{{ceilingRun: ceilingRun{1, 1}, rps: 10000}, {ceilingRun: ceilingRun{16, 1}, rps: 60000}}}
	for _, g := range rep.goroutines {
		rep.cells = append(rep.cells,
			cell{lib: libs[0], pat: pats[0], g: g, res: result{ops: 20000 * int64(g), allowed: 20000 * int64(g), elapsed: time.Second}},
			cell{lib: libs[1], pat: pats[0], g: g, res: result{ops: 10000 * int64(g), allowed: 10000 * int64(g), elapsed: time.Second}})
	}
	var b strings.Builder
	rep.writeMarkdown(&b)
	for _, want := range []string{
		"| ratekit | redis | sliding log (Lua, ZSET) | 16 | 320,000 | – | – | 5.33× | 1.00× | 100.0% | 0 | – |",
		"| go-redis/redis_rate | redis | GCRA (Lua) | 1 | 10,000 | – | – | 1.00× | 0.50× | 100.0% | 0 | – |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("Markdown lacks %q:\n%s", want, b.String())
		}
	}
	if err := rep.writeChart(t.TempDir() + "/t.svg"); err != nil {
		t.Errorf("writeChart: %v", err)
	}
}

func TestParseScriptUsec(t *testing.T) {
	info := "# Commandstats\r\ncmdstat_evalsha:calls=300,usec=1500,usec_per_call=5.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_eval:calls=100,usec=900,usec_per_call=9.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_ping:calls=7,usec=7,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n"
	if got := parseScriptUsec(info); got != 6 {
		t.Errorf("parseScriptUsec = %v, want 6", got)
	}
	if got := parseScriptUsec("# Commandstats\r\n"); got != 0 {
		t.Errorf("parseScriptUsec(empty) = %v, want 0", got)
	}
}
