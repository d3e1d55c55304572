// Package ratekitotel records ratekit's decisions as OpenTelemetry
// metrics through a [metric.Meter] the application provides.
//
// An [Observer] is a [core.Observer]: attach it to the limiters
// ([core.WithObserver]: their decisions, store failures and breaker
// changes) and to the middleware (guard.WithObserver: skipped requests,
// bad keys, dry-run denials). The two layers report different events, so
// one observer given to both counts each event once.
//
//	obs, err := ratekitotel.New(otel.Meter("github.com/ratekit/ratekit"))
//	if err != nil { … }
//	login, err := core.NewLimiter(store, policy, core.WithObserver(obs))
//	mux.Handle("POST /login", nethttp.New(login, guard.WithObserver(obs))(loginHandler))
//
// The instruments mirror ratekitprom's metrics. Attributes are the policy
// name (ratekit.policy) and, where it says so, the outcome
// (ratekit.outcome) or source (ratekit.source); never the key, so the
// number of series is bounded by the number of policies:
//
//	ratekit.decisions         counter    {policy, outcome: allowed|denied, source: store|cache|local|open|closed}
//	ratekit.dry_run.denials   counter    {policy}  denials let through by dry-run mode (also in ratekit.decisions)
//	ratekit.skips             counter    {policy}  requests not limited (skip rule, no key)
//	ratekit.blocks            counter    {policy}  requests refused by a block rule (403)
//	ratekit.lockouts          counter    {policy}  denials of a key locked out (also in ratekit.decisions)
//	ratekit.challenges        counter    {policy}  requests challenged (Rule.Challenge; denied in ratekit.decisions)
//	ratekit.passes            counter    {policy}  challenges passed (Limiter.Pass)
//	ratekit.key_errors        counter    {policy}  requests whose key function failed
//	ratekit.fallbacks         counter    {policy, source: local|open|closed}
//	ratekit.deny_cache.hits   counter    {policy}
//	ratekit.store.errors      counter    {policy}
//	ratekit.store.duration    histogram  {policy, result: ok|error}, seconds of calls to a Redis store
//	ratekit.breaker.open      gauge      {policy}  1 while the circuit breaker is open
//	ratekit.breaker.opens     counter    {policy}
package ratekitotel
