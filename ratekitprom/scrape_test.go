package ratekitprom_test

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/ratekit/ratekit/ratekitprom"
)

// A fleet is the app instances of a scenario, each with an observer on a
// registry of its own, scraped as Prometheus would scrape them once a
// minute of the scenario, into the input series of a promtool unit test.
type fleet struct {
	job       string
	instances []*instance
	values    map[string][]float64 // by series in PromQL notation; NaN where it was not exposed
	minutes   int
}

// An instance is one app instance of a fleet.
type instance struct {
	name string
	obs  *ratekitprom.Observer
	reg  *prometheus.Registry
	keys []string // of the samples of the last scrape, in order
	gone bool     // stopped: scraped no more
}

// newFleet returns a fleet of job with one instance for each name.
func newFleet(job string, names ...string) *fleet {
	f := &fleet{job: job, values: map[string][]float64{}}
	for _, name := range names {
		obs := ratekitprom.New()
		reg := prometheus.NewRegistry()
		reg.MustRegister(obs)
		f.instances = append(f.instances, &instance{name: name, obs: obs, reg: reg})
	}
	return f
}

// scrape records what every instance exposes now as the samples of the
// next minute.
func (f *fleet) scrape(t *testing.T) {
	t.Helper()
	for _, in := range f.instances {
		if in.gone {
			continue
		}
		fams, err := in.reg.Gather()
		if err != nil {
			t.Fatalf("Gather: %v", err)
		}
		// Series never go away: the same number of samples as last time
		// are the same series, in the same order (Gather sorts them).
		n := 0
		for _, fam := range fams {
			per := 1
			if fam.GetType() == dto.MetricType_HISTOGRAM {
				per = len(fam.GetMetric()[0].GetHistogram().GetBucket()) + 3
			}
			n += per * len(fam.GetMetric())
		}
		rebuild := n != len(in.keys)
		var keys []string
		vals := make([]float64, 0, n)
		sample := func(name string, m *dto.Metric, le string, v float64) {
			vals = append(vals, v)
			if !rebuild {
				return
			}
			labels := map[string]string{"job": f.job, "instance": in.name}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if le != "" {
				labels["le"] = le
			}
			keys = append(keys, series(name, labels))
		}
		for _, fam := range fams {
			name := fam.GetName()
			for _, m := range fam.GetMetric() {
				switch fam.GetType() {
				case dto.MetricType_COUNTER:
					sample(name, m, "", m.GetCounter().GetValue())
				case dto.MetricType_GAUGE:
					sample(name, m, "", m.GetGauge().GetValue())
				case dto.MetricType_HISTOGRAM:
					h := m.GetHistogram()
					for _, b := range h.GetBucket() {
						sample(name+"_bucket", m, strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64), float64(b.GetCumulativeCount()))
					}
					sample(name+"_bucket", m, "+Inf", float64(h.GetSampleCount()))
					sample(name+"_sum", m, "", h.GetSampleSum())
					sample(name+"_count", m, "", float64(h.GetSampleCount()))
				default:
					t.Fatalf("%s: metric type %v", name, fam.GetType())
				}
			}
		}
		if rebuild {
			in.keys = keys
		}
		if len(vals) != len(in.keys) {
			t.Fatalf("scrape of %s: %d samples, want %d", in.name, len(vals), len(in.keys))
		}
		for i, key := range in.keys {
			vs, ok := f.values[key]
			for !ok && len(vs) < f.minutes {
				vs = append(vs, math.NaN())
			}
			f.values[key] = append(vs, vals[i])
		}
	}
	f.minutes++
	for k, v := range f.values {
		for len(v) < f.minutes {
			v = append(v, math.NaN())
		}
		f.values[k] = v
	}
}

// at returns the value of series name of the fleet's first instance with
// the other labels given as name, value pairs, scraped at minute; NaN if
// it was not exposed.
func (f *fleet) at(name string, minute int, pairs ...string) float64 {
	labels := map[string]string{"job": f.job, "instance": f.instances[0].name}
	for i := 0; i+1 < len(pairs); i += 2 {
		labels[pairs[i]] = pairs[i+1]
	}
	if v := f.values[series(name, labels)]; minute < len(v) {
		return v[minute]
	}
	return math.NaN()
}

// inputSeries returns the fleet's samples as promtool input series.
func (f *fleet) inputSeries() []inputSeries {
	out := make([]inputSeries, 0, len(f.values))
	for _, key := range names(f.values) {
		out = append(out, inputSeries{Series: key, Values: encode(f.values[key])})
	}
	return out
}

// series returns name and labels in PromQL notation, labels sorted.
func series(name string, labels map[string]string) string {
	keys := names(labels)
	pairs := make([]string, len(keys))
	for i, k := range keys {
		pairs[i] = k + "=" + strconv.Quote(labels[k])
	}
	return name + "{" + strings.Join(pairs, ",") + "}"
}

// encode writes values in promtool's expanding notation: "_" for a
// missing sample, "_xN" for N of them, "a+bxN" for a, a+b, ... a+N*b
// (integers only, so that promtool computes them exactly).
func encode(values []float64) string {
	var parts []string
	num := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	for i := 0; i < len(values); {
		j := i + 1
		switch {
		case math.IsNaN(values[i]):
			for j < len(values) && math.IsNaN(values[j]) {
				j++
			}
			if j-i == 1 {
				parts = append(parts, "_")
			} else {
				parts = append(parts, fmt.Sprintf("_x%d", j-i))
			}
		default:
			a := values[i]
			var d float64
			if j < len(values) && !math.IsNaN(values[j]) {
				d = values[j] - a
			}
			if d != 0 && (a != math.Trunc(a) || d != math.Trunc(d)) {
				parts = append(parts, num(a))
				break
			}
			for j < len(values) && values[j]-values[j-1] == d {
				j++
			}
			switch n := j - i - 1; {
			case n == 0:
				parts = append(parts, num(a))
			case d < 0:
				parts = append(parts, fmt.Sprintf("%s-%sx%d", num(a), num(-d), n))
			default:
				parts = append(parts, fmt.Sprintf("%s+%sx%d", num(a), num(d), n))
			}
		}
		i = j
	}
	return strings.Join(parts, " ")
}

func TestEncode(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		values []float64
		want   string
	}{
		{[]float64{nan, nan, 1, 2, 3, 7}, "_x2 1+1x2 7"},
		{[]float64{0, 0, 0, 1, 1}, "0+0x2 1+0x1"},
		{[]float64{nan, 5}, "_ 5"},
		{[]float64{9, 6, 3}, "9-3x2"},
		{[]float64{0.5, 1, 1.5}, "0.5 1 1.5"},
		{[]float64{4}, "4"},
	}
	for _, tc := range tests {
		if got := encode(tc.values); got != tc.want {
			t.Errorf("encode(%v) = %q, want %q", tc.values, got, tc.want)
		}
	}
}
