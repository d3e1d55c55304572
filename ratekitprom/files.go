package ratekitprom

import (
	"bytes"
	_ "embed" // the rules and the dashboard
)

//go:embed rules.yml
var rules []byte

//go:embed dashboard.json
var dashboard []byte

// Rules returns a Prometheus rule file (YAML) for the metrics of an
// [Observer] whose namespace is namespace ([DefaultNamespace] unless
// [WithNamespace] set another): alerting rules for a fallback episode
// under way (RatekitFallbackActive), a circuit breaker open
// (RatekitBreakerOpen), failing store calls (RatekitStoreErrors), a
// store check that found the store misconfigured
// (RatekitStoreMisconfigured) or failed otherwise
// (RatekitStoreCheckFailed), and a spike of a policy's refusals
// (RatekitRefusalSpike), with the recording rules they use. Load it
// through rule_files in Prometheus's configuration; docs/operations.md
// says what each alert means and what to do.
func Rules(namespace string) []byte { return withNamespace(rules, namespace) }

// Dashboard returns a Grafana dashboard (JSON, to import) of every
// series of an [Observer] whose namespace is namespace: decisions by
// outcome and source, refusal ratio, refusals by kind, requests without
// a decision, fallback episodes and decisions, circuit breakers, store
// latency quantiles, store errors and failed store checks, per policy.
// It asks for a Prometheus data source, and filters by job, instance and
// policy.
func Dashboard(namespace string) []byte { return withNamespace(dashboard, namespace) }

// withNamespace returns a copy of file with the default namespace of
// every metric name replaced by namespace. The files name nothing else
// "ratekit_" (a test checks it).
func withNamespace(file []byte, namespace string) []byte {
	prefix := ""
	if namespace != "" {
		prefix = namespace + "_"
	}
	return bytes.ReplaceAll(file, []byte(DefaultNamespace+"_"), []byte(prefix))
}
