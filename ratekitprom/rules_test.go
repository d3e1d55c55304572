package ratekitprom_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"text/template"
	"time"

	"github.com/redis/go-redis/v9"
	"go.yaml.in/yaml/v3"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/ratekitprom"
	"github.com/ratekit/ratekit/redisstore"
)

// ruleFile is a Prometheus rule file, as far as the tests read it.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Record      string            `yaml:"record"`
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// readRules parses the rule file b.
func readRules(t *testing.T, b []byte) ruleFile {
	t.Helper()
	var f ruleFile
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("rules: %v", err)
	}
	return f
}

// rules returns every rule of f.
func (f ruleFile) rules() []rule {
	var out []rule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

// recorded adds to series the series the recording rules of f write, with
// the labels they group by.
func (f ruleFile) recorded(t *testing.T, series map[string][]string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for k, v := range series {
		out[k] = v
	}
	for _, r := range f.rules() {
		if r.Record == "" {
			continue
		}
		u, err := parse(r.Expr)
		if err != nil {
			t.Fatalf("record %s: %v", r.Record, err)
		}
		out[r.Record] = u.grouping
	}
	return out
}

// metricName matches a metric or recording rule name.
var metricName = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)

// checkPrefix reports every name in file (what) that holds the default
// namespace's prefix and is not one of the known series: Rules and
// Dashboard rename every such name.
func checkPrefix(t *testing.T, what string, file []byte, known map[string][]string) {
	t.Helper()
	for _, name := range metricName.FindAllString(string(file), -1) {
		if strings.Contains(name, ratekitprom.DefaultNamespace+"_") {
			if _, ok := known[name]; !ok {
				t.Errorf("%s names %q, which is no series ratekitprom exports nor one its rules record", what, name)
			}
		}
	}
}

func TestRulesFile(t *testing.T) {
	// Rules, for the default namespace, another and none: parsed by
	// promtool (Prometheus 2.42) and by the Prometheus parser of today,
	// every series a rule reads exported with the labels it uses, and
	// every alert documented for the operator.
	severities := map[string]bool{"critical": true, "warning": true}
	for _, ns := range []string{ratekitprom.DefaultNamespace, "app_limits", ""} {
		t.Run(fmt.Sprintf("namespace %q", ns), func(t *testing.T) {
			b := ratekitprom.Rules(ns)
			f := readRules(t, b)
			known := f.recorded(t, exported(t, ratekitprom.WithNamespace(ns)))
			alerts := 0
			for _, r := range f.rules() {
				name := r.Alert + r.Record
				checkExpr(t, name, r.Expr, known)
				if r.Alert == "" {
					continue
				}
				alerts++
				if !severities[r.Labels["severity"]] {
					t.Errorf("alert %s: severity %q, want critical or warning", r.Alert, r.Labels["severity"])
				}
				for _, a := range []string{"summary", "description"} {
					if r.Annotations[a] == "" {
						t.Errorf("alert %s has no %s", r.Alert, a)
					}
				}
				for a, text := range r.Annotations {
					// TestRules renders annotations with the labels of
					// each alert; it knows no value.
					if strings.Contains(text, "$value") || strings.Contains(text, ".Value") {
						t.Errorf("alert %s: annotation %s uses the value: say it with labels only", r.Alert, a)
					}
				}
			}
			if alerts == 0 {
				t.Error("no alert")
			}
			if ns == ratekitprom.DefaultNamespace {
				checkPrefix(t, "rules.yml", b, known)
			}
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "rules.yml"), b, 0o644); err != nil {
				t.Fatal(err)
			}
			runPromtool(t, dir, "check", "rules", "rules.yml")
		})
	}
}

// A checkpoint says which alerts fire at a minute of a scenario: by alert
// name, the labels of each firing alert, those of its expression's result
// (the rule's own labels are added). Every other alert must not fire then.
type checkpoint struct {
	minute int
	firing map[string][]map[string]string
}

// A scenario drives real limiters observed by the instances of a fleet,
// scraping it once a minute, and says what must fire when.
type scenario func(t *testing.T) (*fleet, []checkpoint)

func TestRules(t *testing.T) {
	// Each alert fires on the series ratekitprom really exports, with
	// their labels, when it should, and only then: promtool (Prometheus
	// 2.42's rule engine) evaluates the shipped rules on what real
	// limiters made an observer expose, minute by minute. Alerts on new
	// series get a scenario (or a checkpoint) here; the end of the test
	// names any alert that fires in none.
	promtool(t)
	rules := ratekitprom.Rules(ratekitprom.DefaultNamespace)
	file := readRules(t, rules)
	fired := map[string]bool{}
	scenarios := []struct {
		name string
		run  scenario
	}{
		{"store outage and checks", storeScenario},
		{"store error ratio", errorRatioScenario},
		{"refusal spike", refusalScenario},
		{"rules that differ", rulesDifferScenario},
	}
	ran := 0
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			f, checks := sc.run(t)
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "rules.yml"), rules, 0o644); err != nil {
				t.Fatal(err)
			}
			test := unitTest{RuleFiles: []string{"rules.yml"}, EvaluationInterval: "1m",
				Tests: []testGroup{{Interval: "1m", InputSeries: f.inputSeries()}}}
			for _, c := range checks {
				for _, r := range file.rules() {
					if r.Alert == "" {
						continue
					}
					at := alertTest{EvalTime: fmt.Sprintf("%dm", c.minute), Alertname: r.Alert, ExpAlerts: []expAlert{}}
					for _, labels := range c.firing[r.Alert] {
						at.ExpAlerts = append(at.ExpAlerts, expected(t, r, labels))
					}
					test.Tests[0].AlertRuleTests = append(test.Tests[0].AlertRuleTests, at)
				}
			}
			b, err := yaml.Marshal(test)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "test.yml"), b, 0o644); err != nil {
				t.Fatal(err)
			}
			runPromtool(t, dir, "test", "rules", "test.yml")
			ran++
			for _, c := range checks {
				for alert, labels := range c.firing {
					fired[alert] = fired[alert] || len(labels) > 0
				}
			}
		})
	}
	if ran < len(scenarios) {
		return // some were skipped (-short) or left out (-run)
	}
	for _, r := range file.rules() {
		if r.Alert != "" && !fired[r.Alert] {
			t.Errorf("alert %s fires in no scenario of TestRules: add one that makes it fire", r.Alert)
		}
	}
}

// expected returns the alert r raises for a result with labels: its
// labels and its annotations, rendered as Prometheus renders them.
func expected(t *testing.T, r rule, labels map[string]string) expAlert {
	t.Helper()
	a := expAlert{ExpLabels: map[string]string{}, ExpAnnotations: map[string]string{}}
	for k, v := range labels {
		a.ExpLabels[k] = v
	}
	for k, v := range r.Labels {
		a.ExpLabels[k] = v
	}
	for k, text := range r.Annotations {
		// The variables Prometheus defines for alert templates.
		tmpl, err := template.New(r.Alert).Option("missingkey=error").
			Parse("{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$externalURL := .ExternalURL}}{{$value := .Value}}" + text)
		if err != nil {
			t.Fatalf("alert %s: annotation %s: %v", r.Alert, k, err)
		}
		var b strings.Builder
		data := struct {
			Labels, ExternalLabels map[string]string
			ExternalURL            string
			Value                  float64
		}{Labels: labels}
		if err := tmpl.Execute(&b, data); err != nil {
			t.Fatalf("alert %s: annotation %s with labels %v: %v", r.Alert, k, labels, err)
		}
		a.ExpAnnotations[k] = b.String()
	}
	return a
}

// A promtool unit test file (promtool test rules).
type unitTest struct {
	RuleFiles          []string    `yaml:"rule_files"`
	EvaluationInterval string      `yaml:"evaluation_interval"`
	Tests              []testGroup `yaml:"tests"`
}

type testGroup struct {
	Interval       string        `yaml:"interval"`
	InputSeries    []inputSeries `yaml:"input_series"`
	AlertRuleTests []alertTest   `yaml:"alert_rule_test"`
}

type inputSeries struct {
	Series string `yaml:"series"`
	Values string `yaml:"values"`
}

type alertTest struct {
	EvalTime  string     `yaml:"eval_time"`
	Alertname string     `yaml:"alertname"`
	ExpAlerts []expAlert `yaml:"exp_alerts"`
}

type expAlert struct {
	ExpLabels      map[string]string `yaml:"exp_labels"`
	ExpAnnotations map[string]string `yaml:"exp_annotations"`
}

// storeScenario is one app instance ("app-1:8080" of job "app") with four
// policies on real Redis servers, for 36 minutes:
//
//   - api, on a healthy server: ten admissions and a denial a minute;
//   - login, the same traffic on a server stopped at minute 5 and
//     restarted, empty, at minute 25: store errors, its circuit breaker
//     open and a fallback episode from minute 5, and none of them from
//     minute 25;
//   - misconfigured, on a client of a database the server does not have:
//     Limiter.Check at minute 0 finds core.ErrMisconfigured;
//   - evicting, on a server whose maxmemory-policy is allkeys-lru:
//     Limiter.Check at minute 0 finds that it can evict limiter keys.
func storeScenario(t *testing.T) (*fleet, []checkpoint) {
	healthy := redistest.Start(t)
	flaky := redistest.Start(t)
	lru := redistest.Start(t, redistest.WithArgs("--maxmemory-policy", "allkeys-lru"))
	f := newFleet("app", "app-1:8080")
	obs := core.WithObserver(f.instances[0].obs)
	// A generous timeout: a healthy store that timed out on a loaded
	// machine would begin a fallback episode of its own.
	timeout := core.WithTimeout(testkit.StoreTimeout)
	client := func(o *redis.Options) *redis.Client {
		c := redis.NewClient(o)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	api := testkit.Limiter(t, redisstore.New(healthy.Client(t)), testkit.Policy("api", testkit.PerMinute(5)), obs, timeout)
	// No retries, so that every call to the stopped server fails at once,
	// and a breaker that lets a probe through a millisecond after it
	// opens, so that every call of the outage is a failing store call.
	login := testkit.Limiter(t, redisstore.New(client(&redis.Options{Addr: flaky.Addr(), MaxRetries: -1, DialerRetries: 1})),
		testkit.Policy("login", testkit.PerMinute(5)), obs, timeout, core.WithBreaker(2, time.Millisecond))
	misconfigured := testkit.Limiter(t, redisstore.New(client(&redis.Options{Addr: healthy.Addr(), DB: 99, MaxRetries: -1})),
		testkit.Policy("misconfigured", testkit.PerMinute(5)), obs)
	evicting := testkit.Limiter(t, redisstore.New(lru.Client(t)), testkit.Policy("evicting", testkit.PerMinute(5)), obs)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range []struct {
		l    *core.Limiter
		want error
	}{{api, nil}, {login, nil}, {misconfigured, core.ErrMisconfigured}, {evicting, redisstore.ErrUnsafeEviction}} {
		if err := c.l.Check(ctx); !errors.Is(err, c.want) || (err == nil) != (c.want == nil) {
			t.Fatalf("Check of %s = %v, want %v", c.l.Policy().Name, err, c.want)
		}
	}
	traffic := func(l *core.Limiter, minute int, pause time.Duration) {
		allow := func(key string) {
			time.Sleep(pause)
			if _, err := l.Allow(ctx, key); err != nil {
				t.Fatalf("Allow(%q) of %s: %v", key, l.Policy().Name, err)
			}
		}
		for i := range 10 {
			allow(fmt.Sprintf("user-%d-%d", minute, i))
		}
		for range 6 { // the sixth is denied
			allow(fmt.Sprintf("flood-%d", minute))
		}
	}
	const down, up, end = 5, 25, 36
	for minute := range end {
		pause := time.Duration(0)
		switch minute {
		case down:
			flaky.Stop()
		case up:
			flaky.Restart()
			// A fallback episode ends with a store decision a second
			// after the last fallback.
			time.Sleep(1100 * time.Millisecond)
		}
		if minute >= down && minute < up {
			pause = 2 * time.Millisecond
		}
		traffic(api, minute, 0)
		traffic(login, minute, pause)
		f.scrape(t)
	}
	// The scenario did what it says.
	for _, c := range []struct {
		series string
		minute int
		pairs  []string
		want   float64
	}{
		{"ratekit_fallback_active", down - 1, []string{"policy", "login"}, 0},
		{"ratekit_fallback_active", down, []string{"policy", "login"}, 1},
		{"ratekit_fallback_active", up - 1, []string{"policy", "login"}, 1},
		{"ratekit_fallback_active", up, []string{"policy", "login"}, 0},
		{"ratekit_breaker_open", down, []string{"policy", "login"}, 1},
		{"ratekit_breaker_open", up - 1, []string{"policy", "login"}, 1},
		{"ratekit_breaker_open", up, []string{"policy", "login"}, 0},
		{"ratekit_fallback_active", end - 1, []string{"policy", "api"}, 0},
		{"ratekit_store_errors_total", end - 1, []string{"policy", "api"}, 0},
		{"ratekit_store_check_failures_total", 0, []string{"policy", "misconfigured", "reason", "misconfigured"}, 1},
		{"ratekit_store_check_failures_total", 0, []string{"policy", "evicting", "reason", "other"}, 1},
		{"ratekit_store_check_failures_total", 0, []string{"policy", "api", "reason", "other"}, 0},
	} {
		if got := f.at(c.series, c.minute, c.pairs...); got != c.want {
			t.Errorf("%s%v at minute %d = %v, want %v", c.series, c.pairs, c.minute, got, c.want)
		}
	}
	if e := f.at("ratekit_store_errors_total", up-1, "policy", "login") - f.at("ratekit_store_errors_total", down-1, "policy", "login"); e < up-down {
		t.Errorf("login: %v store errors during the outage, want one a minute at least", e)
	}
	if t.Failed() {
		t.FailNow()
	}

	at := func(policy string, pairs ...string) map[string]string {
		l := map[string]string{"job": "app", "instance": "app-1:8080", "policy": policy}
		for i := 0; i+1 < len(pairs); i += 2 {
			l[pairs[i]] = pairs[i+1]
		}
		return l
	}
	checks := map[string][]map[string]string{
		"RatekitStoreMisconfigured": {at("misconfigured", "reason", "misconfigured")},
		"RatekitStoreCheckFailed":   {at("evicting", "reason", "other")},
	}
	outage := map[string][]map[string]string{
		"RatekitFallbackActive": {at("login")},
		"RatekitBreakerOpen":    {at("login")},
		"RatekitStoreErrors":    {at("login")},
	}
	for k, v := range checks {
		outage[k] = v
	}
	return f, []checkpoint{
		{down - 1, checks},
		{down, checks}, // the outage has begun: its alerts wait out their `for`
		{12, outage},
		{up - 1, outage},
		{end - 1, checks}, // over; a failed check stays until a restart
	}
}

// errorRatioScenario is one app instance ("app-1:8080" of job "app") with
// two policies on stores that fail now and then, for 20 minutes:
//
//   - shaky: 100 decisions a minute, one store call in 50 fails (2%);
//   - sturdy: 200 decisions a minute, one store call in 200 fails (0.5%),
//     under RatekitStoreErrors's 1%.
//
// Failures that recur within a second keep a fallback episode going, so
// both are in one all along.
func errorRatioScenario(t *testing.T) (*fleet, []checkpoint) {
	f := newFleet("app", "app-1:8080")
	obs := core.WithObserver(f.instances[0].obs)
	shaky := testkit.Limiter(t, &failEvery{Store: core.NewMemoryStore(), n: 50}, testkit.Policy("shaky", testkit.PerMinute(5)), obs)
	sturdy := testkit.Limiter(t, &failEvery{Store: core.NewMemoryStore(), n: 200}, testkit.Policy("sturdy", testkit.PerMinute(5)), obs)
	ctx := context.Background()
	const end = 20
	for minute := range end {
		for _, c := range []struct {
			l *core.Limiter
			n int
		}{{shaky, 100}, {sturdy, 200}} {
			for i := range c.n {
				if _, err := c.l.Allow(ctx, fmt.Sprintf("user-%d-%d", minute, i)); err != nil {
					t.Fatal(err)
				}
			}
		}
		f.scrape(t)
	}
	for _, c := range []struct {
		policy string
		want   float64
	}{{"shaky", 2}, {"sturdy", 1}} {
		if got := f.at("ratekit_store_errors_total", end-1, "policy", c.policy) - f.at("ratekit_store_errors_total", end-2, "policy", c.policy); got != c.want {
			t.Fatalf("%s: %v store errors a minute, want %v", c.policy, got, c.want)
		}
	}
	at := func(policy string) map[string]string {
		return map[string]string{"job": "app", "instance": "app-1:8080", "policy": policy}
	}
	episodes := []map[string]string{at("shaky"), at("sturdy")}
	return f, []checkpoint{
		{3, map[string][]map[string]string{"RatekitFallbackActive": episodes}},
		{15, map[string][]map[string]string{"RatekitFallbackActive": episodes, "RatekitStoreErrors": {at("shaky")}}},
	}
}

// failEvery is a shared store (the limiter does not see a MemoryStore)
// whose every nth Take fails.
type failEvery struct {
	core.Store
	n     int64
	calls atomic.Int64
}

func (s *failEvery) Take(ctx context.Context, q driver.Query) (driver.Result, error) {
	if s.calls.Add(1)%s.n == 0 {
		return driver.Result{}, errors.New("store timed out")
	}
	return s.Store.Take(ctx, q)
}

// refusalScenario is two app instances of job "app", each with policies
// on a MemoryStore of its own, for a day and an hour (the limiters' clock
// steps two minutes a minute, so that each minute starts on empty
// windows). Three users a minute ask once on each instance, and one user
// asks more; from minute 1440 to 1469 the first instance sees more:
//
//   - search: a refusal a minute on each instance, then 300 more a
//     minute: an attack, which fires RatekitRefusalSpike;
//   - burst: 2 refusals a minute in all, then 10 (five times as many,
//     one every six seconds, 28% of the decisions): fires;
//   - surge: 4 refusals a minute, then 10 (2.5 times as many): not three;
//   - trickle: none, then 5 a minute: under one every ten seconds;
//   - crowd: none, then 10 a minute among 250 more users: under 5% of
//     the decisions;
//   - steady: 20 refusals a minute on each instance, 60% of its
//     decisions, all along: that is its normal.
func refusalScenario(t *testing.T) (*fleet, []checkpoint) {
	f := newFleet("app", "app-1:8080", "app-2:8080")
	var now atomic.Int64
	now.Store(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	clock := core.WithClock(func() time.Time { return time.Unix(0, now.Load()) })
	// How often the eager user asks (limit 10), and what the first
	// instance sees more during the spike: the eager user asking that
	// much more, and so many more users.
	type traffic struct {
		policy                string
		eager, more, newUsers int
	}
	traffics := []traffic{
		{"search", 11, 300, 0}, {"burst", 11, 8, 0}, {"surge", 12, 6, 0},
		{"trickle", 10, 5, 0}, {"crowd", 10, 10, 250}, {"steady", 30, 0, 0},
	}
	limiters := make([]map[string]*core.Limiter, len(f.instances))
	for i, in := range f.instances {
		store := core.NewMemoryStore()
		limiters[i] = map[string]*core.Limiter{}
		for _, tr := range traffics {
			limiters[i][tr.policy] = testkit.Limiter(t, store, testkit.Policy(tr.policy, testkit.PerMinute(10)), core.WithObserver(in.obs), clock)
		}
	}
	ctx := context.Background()
	ask := func(l *core.Limiter, key string, n int) {
		for range n {
			if _, err := l.Allow(ctx, key); err != nil {
				t.Fatalf("Allow(%q) of %s: %v", key, l.Policy().Name, err)
			}
		}
	}
	users := make([]string, 253)
	for i := range users {
		users[i] = fmt.Sprintf("user-%d", i)
	}
	const spike, calm, end = 1440, 1470, 1500
	for minute := range end {
		for i := range f.instances {
			during := i == 0 && minute >= spike && minute < calm
			for _, tr := range traffics {
				l := limiters[i][tr.policy]
				for _, u := range users[:3] {
					ask(l, u, 1)
				}
				eager := tr.eager
				if during {
					eager += tr.more
					for _, u := range users[3 : 3+tr.newUsers] {
						ask(l, u, 1)
					}
				}
				ask(l, "eager", eager)
			}
		}
		f.scrape(t)
		now.Add(int64(2 * time.Minute))
	}
	denied := func(policy string, minute int) float64 {
		return f.at("ratekit_decisions_total", minute, "outcome", "denied", "policy", policy, "source", "store")
	}
	for _, c := range []struct {
		policy string
		minute int
		want   float64
	}{
		{"search", 1, 1}, {"search", spike, 301}, {"search", calm, 1},
		{"burst", spike, 9}, {"surge", spike - 1, 2}, {"surge", spike, 8}, {"trickle", spike - 1, 0}, {"trickle", spike, 5},
		{"crowd", spike, 10}, {"steady", 1, 20}, {"steady", spike, 20},
	} {
		if got := denied(c.policy, c.minute) - denied(c.policy, c.minute-1); got != c.want {
			t.Errorf("%s on app-1 at minute %d: %v refusals, want %v", c.policy, c.minute, got, c.want)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	none := map[string][]map[string]string{}
	spiking := []map[string]string{{"job": "app", "policy": "search"}, {"job": "app", "policy": "burst"}}
	return f, []checkpoint{
		{spike - 1, none}, // a day of refusals, 60% of steady's decisions
		{spike + 5, none}, // the spike has begun: it waits out its `for`
		{spike + 25, map[string][]map[string]string{"RatekitRefusalSpike": spiking}},
		{end - 1, none}, // over
	}
}

// rulesDifferScenario is two app instances of job "app" on one healthy
// Redis, for 40 minutes: app-1 limits policy login to 5 a second, app-2 to
// 20 a minute, until app-2 stops at minute 25 (its store closed). Each
// instance's store says so when its limiter checks it, at start and once
// app-2 has gone: RatekitRulesDiffer fires on both after its quarter of
// an hour, and no more once app-2 has stopped.
func rulesDifferScenario(t *testing.T) (*fleet, []checkpoint) {
	srv := redistest.Start(t)
	f := newFleet("app", "app-1:8080", "app-2:8080")
	one, two := redisstore.New(srv.Client(t)), redisstore.New(srv.Client(t))
	t.Cleanup(one.Close)
	a := testkit.Limiter(t, one, testkit.Policy("login", core.Rule{Limit: 5, Window: time.Second}), core.WithObserver(f.instances[0].obs))
	b := testkit.Limiter(t, two, testkit.Policy("login", testkit.PerMinute(20)), core.WithObserver(f.instances[1].obs))
	ctx := context.Background()
	// Each instance learns of the other within one announcement (2 s): a
	// Check may read the fleet before the other announced.
	testkit.WaitUntil(t, "each instance's Check says the rules differ", func() bool {
		return a.Check(ctx) != nil && b.Check(ctx) != nil
	})
	const stop, end = 25, 40
	for minute := range end {
		if minute == stop {
			two.Close()
			f.instances[1].gone = true
			if err := a.Check(ctx); err != nil {
				t.Fatalf("Check once the other instance stopped = %v, want nil", err)
			}
		}
		f.scrape(t)
	}
	at := func(instance string) map[string]string {
		return map[string]string{"job": "app", "instance": instance, "policy": "login"}
	}
	both := map[string][]map[string]string{"RatekitRulesDiffer": {at("app-1:8080"), at("app-2:8080")}}
	// app-2's last samples count for Prometheus's five minutes of
	// lookback, as a target that vanished without staleness markers.
	gone := map[string][]map[string]string{"RatekitRulesDiffer": {at("app-2:8080")}}
	return f, []checkpoint{
		{14, nil}, // its quarter of an hour is not over
		{15, both},
		{stop - 1, both},
		{stop + 1, gone},
		{stop + 6, nil},
		{end - 1, nil},
	}
}
