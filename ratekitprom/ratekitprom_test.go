package ratekitprom_test

import (
	"context"
	"errors"
	"io"
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
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/nethttp"
	"github.com/ratekit/ratekit/ratekitprom"
)

// flakyStore is a MemoryStore whose Take and Peek fail while fail is set.
type flakyStore struct {
	*core.MemoryStore
	fail atomic.Bool
}

var errDown = errors.New("store down")

func (s *flakyStore) Take(ctx context.Context, q core.Query) (core.Result, error) {
	if s.fail.Load() {
		return core.Result{}, errDown
	}
	return s.MemoryStore.Take(ctx, q)
}

func (s *flakyStore) Peek(ctx context.Context, q core.Query) (core.Result, error) {
	if s.fail.Load() {
		return core.Result{}, errDown
	}
	return s.MemoryStore.Peek(ctx, q)
}

// userKey keys by X-User: absent is no key (skipped), "!" is malformed.
func userKey(r keyfunc.Request) (string, error) {
	switch u := r.Header("X-User"); u {
	case "":
		return "", keyfunc.ErrNoKey
	case "!":
		return "", errors.New("malformed user")
	default:
		return u, nil
	}
}

func newLimiter(t *testing.T, store core.Store, name string, limit int64, opts ...core.Option) *core.Limiter {
	t.Helper()
	l, err := core.NewLimiter(store, core.Policy{Name: name, Rules: []core.Rule{{Limit: limit, Window: time.Minute}}}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// get sends GET / with the X-User header (none when user is "-").
func get(t *testing.T, url, user string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if user != "-" {
		req.Header.Set("X-User", user)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

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

	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	login := newLimiter(t, remote{core.NewMemoryStore()}, "login", 2, core.WithObserver(obs))
	dry := newLimiter(t, core.NewMemoryStore(), "dry", 1, core.WithObserver(obs))
	mux := http.NewServeMux()
	mux.Handle("GET /login", nethttp.New(login, guard.WithKey(userKey), guard.WithObserver(obs))(ok))
	mux.Handle("GET /dry", nethttp.New(dry, guard.WithKey(userKey), guard.WithDryRun(true), guard.WithObserver(obs))(ok))
	app := httptest.NewServer(mux)
	defer app.Close()

	// login: two admissions, a denial by the store, a denial from the deny
	// cache, a request without key, a malformed key.
	for i, step := range []struct {
		user string
		want int
	}{
		{"alice", 200}, {"alice", 200}, {"alice", 429}, {"alice", 429}, {"-", 200}, {"!", 400},
	} {
		if got := get(t, app.URL+"/login", step.user); got != step.want {
			t.Fatalf("login request %d (%s): status %d, want %d", i+1, step.user, got, step.want)
		}
	}
	// dry: one admission, one denial let through.
	for i := range 2 {
		if got := get(t, app.URL+"/dry", "bob"); got != 200 {
			t.Fatalf("dry request %d: status %d, want 200", i+1, got)
		}
	}
	// flaky: the limiter reports itself (core.WithObserver). Two store
	// failures open the breaker; the third call does not reach the store;
	// after the cool-down a successful probe closes it.
	store := &flakyStore{MemoryStore: core.NewMemoryStore()}
	store.fail.Store(true)
	flaky := newLimiter(t, store, "flaky", 100, core.WithObserver(obs), core.WithBreaker(2, 30*time.Millisecond))
	ctx := context.Background()
	for i := range 3 {
		d, err := flaky.Allow(ctx, "carol")
		if err != nil || d.Source != core.SourceLocal {
			t.Fatalf("flaky call %d = %+v, %v; want a local fallback", i+1, d, err)
		}
	}
	mid := scrape(t, metrics.URL)
	if v, _ := value(mid, "ratekit_breaker_open", "policy=flaky"); v != 1 {
		t.Errorf("ratekit_breaker_open{policy=flaky} = %v while open, want 1", v)
	}
	store.fail.Store(false)
	time.Sleep(60 * time.Millisecond)
	if d, err := flaky.Allow(ctx, "carol"); err != nil || d.Source != core.SourceStore {
		t.Fatalf("flaky probe = %+v, %v; want a store decision", d, err)
	}

	// A request a block rule refused (guard.WithBlock).
	obs.Observe(ctx, core.Event{Kind: core.EventBlock, Policy: "login"})

	// ban locks a key out after its limit: one admission, then two
	// denials of the locked key (the first one starts the lockout).
	ban, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{Name: "ban",
		Rules: []core.Rule{{Limit: 1, Window: time.Minute}}, Lockout: core.Lockout{For: time.Hour}}, core.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if d, err := ban.Allow(ctx, "mallory"); err != nil || d.Allowed != (i == 0) || d.Locked != (i > 0) {
			t.Fatalf("ban call %d = %+v, %v; want allowed, then locked out", i+1, d, err)
		}
	}

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
				if lp.GetName() == "key" || strings.Contains(lp.GetValue(), "alice") || strings.Contains(lp.GetValue(), "carol") {
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

// remote hides that a store is a MemoryStore, so that the limiter treats
// it as a remote store, with a deny cache.
type remote struct{ core.Store }
