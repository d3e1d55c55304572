package ratekitprom_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/internal/test/observertest"
	"github.com/ratekit/ratekit/ratekitprom"
)

// scrape fetches url and parses it with the Prometheus text parser.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: status %d", resp.StatusCode)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// value returns the value of the series of family name with exactly the
// given labels ("k=v" pairs), and whether it exists. For a histogram it
// returns the sample count.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	f, ok := fams[name]
	if !ok {
		return 0, false
	}
	want := strings.Join(labels, ",")
	for _, m := range f.GetMetric() {
		var got []string
		for _, lp := range m.GetLabel() {
			got = append(got, lp.GetName()+"="+lp.GetValue())
		}
		sort.Strings(got)
		if strings.Join(got, ",") != want {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

func TestMetricsScrape(t *testing.T) {
	obs := ratekitprom.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(obs)
	metrics := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer metrics.Close()

	observertest.Run(t, obs, func() {
		if v, _ := value(scrape(t, metrics.URL), "ratekit_breaker_open", "policy=flaky"); v != 1 {
			t.Errorf("ratekit_breaker_open{policy=flaky} = %v while open, want 1", v)
		}
	})

	fams := scrape(t, metrics.URL)
	tests := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"ratekit_decisions_total", []string{"outcome=allowed", "policy=login", "source=store"}, 2},
		{"ratekit_decisions_total", []string{"outcome=denied", "policy=login", "source=store"}, 1},
		{"ratekit_decisions_total", []string{"outcome=denied", "policy=login", "source=cache"}, 1},
		{"ratekit_decisions_total", []string{"outcome=allowed", "policy=login", "source=local"}, 0},
		{"ratekit_deny_cache_hits_total", []string{"policy=login"}, 1},
		{"ratekit_skips_total", []string{"policy=login"}, 1},
		{"ratekit_blocks_total", []string{"policy=login"}, 1},
		{"ratekit_lockouts_total", []string{"policy=ban"}, 2},
		{"ratekit_lockouts_total", []string{"policy=login"}, 0},
		{"ratekit_decisions_total", []string{"outcome=denied", "policy=ban", "source=store"}, 2},
		{"ratekit_key_errors_total", []string{"policy=login"}, 1},
		{"ratekit_store_latency_seconds", []string{"policy=login", "result=ok"}, 3},
		{"ratekit_decisions_total", []string{"outcome=allowed", "policy=dry", "source=store"}, 1},
		{"ratekit_decisions_total", []string{"outcome=denied", "policy=dry", "source=store"}, 1},
		{"ratekit_dry_run_denials_total", []string{"policy=dry"}, 1},
		{"ratekit_dry_run_denials_total", []string{"policy=login"}, 0},
		{"ratekit_store_errors_total", []string{"policy=flaky"}, 2},
		{"ratekit_store_latency_seconds", []string{"policy=flaky", "result=error"}, 2},
		{"ratekit_store_latency_seconds", []string{"policy=flaky", "result=ok"}, 1},
		{"ratekit_fallbacks_total", []string{"policy=flaky", "source=local"}, 3},
		{"ratekit_decisions_total", []string{"outcome=allowed", "policy=flaky", "source=local"}, 3},
		{"ratekit_decisions_total", []string{"outcome=allowed", "policy=flaky", "source=store"}, 1},
		{"ratekit_breaker_opens_total", []string{"policy=flaky"}, 1},
		{"ratekit_breaker_open", []string{"policy=flaky"}, 0},
		{"ratekit_breaker_open", []string{"policy=login"}, 0},
		{"ratekit_challenges_total", []string{"policy=captcha"}, 2},
		{"ratekit_challenges_total", []string{"policy=login"}, 0},
		{"ratekit_passes_total", []string{"policy=captcha"}, 1},
		{"ratekit_decisions_total", []string{"outcome=denied", "policy=captcha", "source=store"}, 2},
		{"ratekit_decisions_total", []string{"outcome=allowed", "policy=captcha", "source=store"}, 1},
	}
	for _, tc := range tests {
		got, ok := value(fams, tc.name, tc.labels...)
		if !ok {
			t.Errorf("%s{%s} missing from /metrics", tc.name, strings.Join(tc.labels, ","))
			continue
		}
		if got != tc.want {
			t.Errorf("%s{%s} = %v, want %v", tc.name, strings.Join(tc.labels, ","), got, tc.want)
		}
	}
	// Bounded cardinality: no series carries a key.
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "key" || strings.Contains(lp.GetValue(), "alice") || strings.Contains(lp.GetValue(), "carol") || strings.Contains(lp.GetValue(), "trudy") {
					t.Errorf("%s has label %s=%q: keys must never be labels", name, lp.GetName(), lp.GetValue())
				}
			}
		}
	}
}

func TestOptions(t *testing.T) {
	tests := []struct {
		name     string
		opts     []ratekitprom.Option
		family   string
		labels   []string
		buckets  int
		wantSeen bool
	}{
		{"default namespace", nil, "ratekit_decisions_total", []string{"outcome=allowed", "policy=p", "source=store"}, 11, true},
		{"own namespace", []ratekitprom.Option{ratekitprom.WithNamespace("app_limits")}, "app_limits_decisions_total", []string{"outcome=allowed", "policy=p", "source=store"}, 11, true},
		{"const labels", []ratekitprom.Option{ratekitprom.WithConstLabels(prometheus.Labels{"service": "api"})}, "ratekit_decisions_total", []string{"outcome=allowed", "policy=p", "service=api", "source=store"}, 11, true},
		{"buckets", []ratekitprom.Option{ratekitprom.WithBuckets([]float64{0.001, 0.01})}, "ratekit_decisions_total", []string{"outcome=allowed", "policy=p", "source=store"}, 2, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			obs := ratekitprom.New(tc.opts...)
			reg := prometheus.NewPedanticRegistry()
			reg.MustRegister(obs)
			obs.Observe(context.Background(), core.Event{Kind: core.EventDecision, Policy: "p", Key: "k",
				Decision: core.Decision{Allowed: true, Source: core.SourceStore}, Latency: time.Millisecond})
			fams, err := reg.Gather()
			if err != nil {
				t.Fatalf("Gather: %v", err)
			}
			byName := map[string]*dto.MetricFamily{}
			for _, f := range fams {
				byName[f.GetName()] = f
			}
			got, ok := value(byName, tc.family, tc.labels...)
			if ok != tc.wantSeen || got != 1 {
				t.Errorf("%s{%s} = %v (present %v), want 1", tc.family, strings.Join(tc.labels, ","), got, ok)
			}
			for name, f := range byName {
				if !strings.HasSuffix(name, "store_latency_seconds") {
					continue
				}
				for _, m := range f.GetMetric() {
					if n := len(m.GetHistogram().GetBucket()); n != tc.buckets {
						t.Errorf("%s has %d buckets, want %d", name, n, tc.buckets)
					}
				}
			}
		})
	}
}

// BenchmarkObserve measures the cost the observer adds to a decision.
func BenchmarkObserve(b *testing.B) {
	obs := ratekitprom.New()
	e := core.Event{Kind: core.EventDecision, Policy: "p", Decision: core.Decision{Allowed: true, Source: core.SourceStore}, Latency: time.Millisecond}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		obs.Observe(ctx, e)
	}
}

func TestFallbackAndCheckSeries(t *testing.T) {
	// ratekit_fallback_active follows a limiter's fallback episode, and
	// ratekit_store_check_failures_total counts its failed store checks
	// by reason.
	obs := ratekitprom.New()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(obs)
	gather := func() map[string]*dto.MetricFamily {
		t.Helper()
		fams, err := reg.Gather()
		if err != nil {
			t.Fatalf("Gather: %v", err)
		}
		byName := map[string]*dto.MetricFamily{}
		for _, f := range fams {
			byName[f.GetName()] = f
		}
		return byName
	}
	store := &switchStore{Store: core.NewMemoryStore()}
	l, err := core.NewLimiter(store, core.Policy{Name: "p", Rules: []core.Rule{{Limit: 100, Window: time.Minute}}}, core.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i, step := range []struct {
		fail  bool
		pause time.Duration
		want  float64
	}{
		{false, 0, 0},
		{true, 0, 1},                        // a fallback begins an episode
		{false, 0, 1},                       // the store answers, but within a second of the fallback
		{false, 1100 * time.Millisecond, 0}, // a second later: the episode ends
	} {
		store.fail.Store(step.fail)
		time.Sleep(step.pause)
		if _, err := l.Allow(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		if got, ok := value(gather(), "ratekit_fallback_active", "policy=p"); !ok || got != step.want {
			t.Errorf("step %d: ratekit_fallback_active{policy=p} = %v (present %v), want %v", i+1, got, ok, step.want)
		}
	}

	for _, err := range []error{
		fmt.Errorf("redis: cannot be used: %w: WRONGPASS", core.ErrMisconfigured),
		errors.New("redis: maxmemory-policy allkeys-lru can evict live limiter keys"),
		errors.New("redis: dial tcp: connection refused"),
		nil,
	} {
		store.checkErr = err
		if got := l.Check(ctx); !errors.Is(got, err) || (got == nil) != (err == nil) {
			t.Fatalf("Check() = %v, want %v", got, err)
		}
	}
	fams := gather()
	for reason, want := range map[string]float64{ratekitprom.ReasonMisconfigured: 1, ratekitprom.ReasonOther: 2} {
		if got, _ := value(fams, "ratekit_store_check_failures_total", "policy=p", "reason="+reason); got != want {
			t.Errorf("ratekit_store_check_failures_total{policy=p,reason=%s} = %v, want %v", reason, got, want)
		}
	}
}

// switchStore is a shared store on a MemoryStore (the limiter does not
// see a MemoryStore) whose Take fails while fail is set, and whose Check
// returns checkErr.
type switchStore struct {
	core.Store
	fail     atomic.Bool
	checkErr error
}

func (s *switchStore) Take(ctx context.Context, q driver.Query) (driver.Result, error) {
	if s.fail.Load() {
		return driver.Result{}, errors.New("store down")
	}
	return s.Store.Take(ctx, q)
}

// Check implements driver.Checker.
func (s *switchStore) Check(context.Context) error { return s.checkErr }
