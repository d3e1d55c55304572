package ratekitprom_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/ratekitprom"
)

// What the shipped rules and dashboard are checked against: the series a
// real registry exposes once an observer has seen events, with their
// labels, as Prometheus scrapes them (a histogram as its _bucket, _sum and
// _count series).

// targetLabels are the labels Prometheus adds to every scraped series.
var targetLabels = []string{"job", "instance"}

// exported returns the series of a registry holding an observer made with
// opts that has seen every kind of event, by name, each with its label
// names (the target labels included).
func exported(t *testing.T, opts ...ratekitprom.Option) map[string][]string {
	t.Helper()
	obs := ratekitprom.New(opts...)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(obs)
	ctx := context.Background()
	for _, e := range []core.Event{
		{Kind: core.EventDecision, Decision: core.Decision{Allowed: true, Source: core.SourceStore}, Latency: time.Millisecond},
		{Kind: core.EventDecision, Decision: core.Decision{Source: core.SourceCache}},
		{Kind: core.EventStoreError, Err: errors.New("store down"), Latency: time.Millisecond},
		{Kind: core.EventFallbackStart},
		{Kind: core.EventDecision, Decision: core.Decision{Allowed: true, Source: core.SourceLocal}},
		{Kind: core.EventBreakerOpen},
		{Kind: core.EventBreakerClose},
		{Kind: core.EventFallbackEnd, Fallbacks: 1},
		{Kind: core.EventRulesDiffer, Err: errors.New("other configurations")},
		{Kind: core.EventStoreCheck, Err: fmt.Errorf("check: %w", core.ErrMisconfigured)},
		{Kind: guard.EventSkip}, {Kind: guard.EventBlock}, {Kind: guard.EventKeyError}, {Kind: core.EventPass},
		{Kind: guard.EventDryRun, Decision: core.Decision{Source: core.SourceStore}},
	} {
		e.Policy = "p"
		obs.Observe(ctx, e)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	series := map[string][]string{}
	for _, f := range fams {
		var labels []string
		for _, lp := range f.GetMetric()[0].GetLabel() {
			labels = append(labels, lp.GetName())
		}
		labels = append(labels, targetLabels...)
		if f.GetType() == dto.MetricType_HISTOGRAM {
			series[f.GetName()+"_bucket"] = append(slices.Clone(labels), "le")
			series[f.GetName()+"_sum"] = labels
			series[f.GetName()+"_count"] = labels
			continue
		}
		series[f.GetName()] = labels
	}
	return series
}

// family returns the name of the metric family a series belongs to.
func family(series map[string][]string, name string) string {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if _, hist := series[base+"_bucket"]; hist {
				return base
			}
		}
	}
	return name
}

// uses is what one PromQL expression reads: the series it selects, and
// the label names it filters, groups or matches by; and, when it is an
// aggregation by labels, those labels, the only ones of its result.
type uses struct {
	series   []string
	labels   []string
	grouping []string
	problems []string // misuses the parser accepts
}

// parse returns what expr uses, or an error from the Prometheus parser.
func parse(expr string) (uses, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return uses{}, err
	}
	var u uses
	if a, ok := e.(*parser.AggregateExpr); ok && !a.Without {
		u.grouping = a.Grouping
	}
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.VectorSelector:
			u.series = append(u.series, n.Name)
			for _, m := range n.LabelMatchers {
				if m.Name != "__name__" {
					u.labels = append(u.labels, m.Name)
				}
			}
		case *parser.AggregateExpr:
			u.labels = append(u.labels, n.Grouping...)
		case *parser.Call:
			// histogram_quantile needs the buckets' le label.
			if n.Func.Name == "histogram_quantile" && len(n.Args) == 2 {
				if a, ok := n.Args[1].(*parser.AggregateExpr); ok && a.Without == slices.Contains(a.Grouping, "le") {
					u.problems = append(u.problems, "histogram_quantile over an aggregation without le")
				}
			}
		case *parser.BinaryExpr:
			if n.VectorMatching != nil {
				u.labels = append(u.labels, n.VectorMatching.MatchingLabels...)
				u.labels = append(u.labels, n.VectorMatching.Include...)
			}
		}
		return nil
	})
	return u, nil
}

// checkExpr reports, as errors of t naming where, every series expr
// selects that is not in series, and every label it uses that none of
// the series it selects has.
func checkExpr(t *testing.T, where, expr string, series map[string][]string) {
	t.Helper()
	u, err := parse(expr)
	if err != nil {
		t.Errorf("%s: %q does not parse: %v", where, expr, err)
		return
	}
	if len(u.series) == 0 {
		t.Errorf("%s: %q selects no series", where, expr)
	}
	for _, p := range u.problems {
		t.Errorf("%s: %q: %s", where, expr, p)
	}
	has := map[string]bool{}
	for _, name := range u.series {
		labels, ok := series[name]
		if !ok {
			t.Errorf("%s: %q selects %s, which ratekitprom does not export", where, expr, name)
		}
		for _, l := range labels {
			has[l] = true
		}
	}
	for _, l := range u.labels {
		if !has[l] {
			t.Errorf("%s: %q uses label %q, which none of %v has", where, expr, l, u.series)
		}
	}
}

// names returns the keys of m, sorted.
func names[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// promtool returns the path of promtool, which the test needs: it fails
// when promtool is not installed (skips with -short), so that the rules'
// coverage cannot vanish silently.
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		if testing.Short() {
			t.Skip("promtool is not installed (make promtool installs it)")
		}
		t.Fatal("promtool is not installed: `make promtool` installs Debian's (`make test` does it first)")
	}
	return path
}

// runPromtool runs promtool with args in dir and fails t with its output
// when it fails.
func runPromtool(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func TestParse(t *testing.T) {
	// The extraction the checks rely on, on each construct they meet.
	tests := []struct {
		expr         string
		series, labs string
	}{
		{`ratekit_breaker_open == 1`, "ratekit_breaker_open", ""},
		{`sum by (job, policy) (rate(ratekit_decisions_total{outcome="denied"}[5m]))`, "ratekit_decisions_total", "job policy outcome"},
		{`rate(a[5m]) / (rate(a[5m]) + sum without (outcome) (rate(b{source="store"}[5m])))`, "a a b", "outcome source"},
		{`a > on (policy) group_left (reason) b`, "a b", "policy reason"},
		{`histogram_quantile(0.9, sum by (le) (rate(x_bucket[5m])))`, "x_bucket", "le"},
	}
	for _, tc := range tests {
		u, err := parse(tc.expr)
		if err != nil {
			t.Fatalf("parse(%q): %v", tc.expr, err)
		}
		if got := strings.Join(u.series, " "); got != tc.series {
			t.Errorf("parse(%q) series = %q, want %q", tc.expr, got, tc.series)
		}
		if got := strings.Join(u.labels, " "); got != tc.labs {
			t.Errorf("parse(%q) labels = %q, want %q", tc.expr, got, tc.labs)
		}
	}
	if u, _ := parse(`histogram_quantile(0.9, sum by (policy) (rate(x_bucket[5m])))`); len(u.problems) != 1 {
		t.Errorf("parse of histogram_quantile without le: problems %q, want one", u.problems)
	}
	if _, err := parse(`sum by (policy (x)`); err == nil {
		t.Error("parse of a malformed expression: no error")
	}
}
