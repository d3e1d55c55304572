// Package ratekitotel records ratekit's decisions as OpenTelemetry
// metrics through a [metric.Meter] the application provides.
//
// An [Observer] is a [core.Observer]: attach it to the middleware
// (nethttp.WithObserver, ginlimit.WithObserver, …), which sees every
// request the guard handles, or to a limiter with [core.WithObserver] for
// decisions made outside middleware. Attach it in one place per limiter:
// an observer attached to both counts every decision twice.
//
//	obs, err := ratekitotel.New(otel.Meter("github.com/ratekit/ratekit"))
//	if err != nil { … }
//	mux.Handle("POST /login", nethttp.New(login, nethttp.WithObserver(obs))(loginHandler))
//
// The instruments mirror ratekitprom's metrics. Attributes are the policy
// name (ratekit.policy) and, where it says so, the outcome
// (ratekit.outcome) or source (ratekit.source); never the key, so the
// number of series is bounded by the number of policies:
//
//	ratekit.decisions         counter    {policy, outcome: allowed|denied, source: store|cache|local|open|closed}
//	ratekit.dry_run.denials   counter    {policy}  denials let through by dry-run mode (also in ratekit.decisions)
//	ratekit.skips             counter    {policy}  requests not limited (skip rule, no key)
//	ratekit.key_errors        counter    {policy}  requests whose key function failed
//	ratekit.fallbacks         counter    {policy, source: local|open|closed}
//	ratekit.deny_cache.hits   counter    {policy}
//	ratekit.store.errors      counter    {policy}
//	ratekit.store.duration    histogram  {policy, result: ok|error}, seconds
//	ratekit.breaker.open      gauge      {policy}  1 while the circuit breaker is open
//	ratekit.breaker.opens     counter    {policy}
package ratekitotel
