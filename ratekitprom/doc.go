// Package ratekitprom exports ratekit's decisions as Prometheus metrics.
//
// An [Observer] is a [core.Observer] and a [prometheus.Collector]:
// register it, then attach it to the limiters ([core.WithObserver]: their
// decisions, store failures and breaker changes) and to the middleware
// (guard.WithObserver: skipped requests, bad keys, dry-run denials). The
// two layers report different events, so one observer given to both
// counts each event once.
//
//	obs := ratekitprom.New()
//	prometheus.MustRegister(obs)
//	login, err := core.NewLimiter(store, policy, core.WithObserver(obs))
//	mux.Handle("POST /login", nethttp.New(login, guard.WithObserver(obs))(loginHandler))
//	mux.Handle("GET /metrics", promhttp.Handler())
//
// Every metric is labelled by policy name, and by outcome or source where
// it says so; never by key, so the number of series is bounded by the
// number of policies. With the default namespace "ratekit":
//
//	ratekit_decisions_total{policy,outcome,source}  decisions of a limiter; outcome is
//	                                                allowed or denied, source is store,
//	                                                cache, local, open or closed
//	ratekit_dry_run_denials_total{policy}           denials let through by dry-run mode
//	                                                (also counted as denied decisions)
//	ratekit_skips_total{policy}                     requests not limited (skip rule, no key)
//	ratekit_blocks_total{policy}                    requests refused by a block rule (403)
//	ratekit_lockouts_total{policy}                  denials of a key locked out (Policy.Lockout;
//	                                                also counted as denied decisions)
//	ratekit_challenges_total{policy}                requests challenged (Rule.Challenge; also
//	                                                counted as denied decisions)
//	ratekit_passes_total{policy}                    challenges passed (Limiter.Pass)
//	ratekit_key_errors_total{policy}                requests whose key function failed
//	ratekit_fallbacks_total{policy,source}          decisions made by the failure policy
//	                                                because the store failed (local, open, closed)
//	ratekit_deny_cache_hits_total{policy}           denials answered by the deny cache
//	ratekit_store_errors_total{policy}              failed store calls
//	ratekit_store_latency_seconds{policy,result}    latency of calls to a Redis store; result is ok or error
//	ratekit_breaker_open{policy}                    1 while the circuit breaker is open
//	ratekit_breaker_opens_total{policy}             times the circuit breaker opened
//	ratekit_fallback_active{policy}                 1 while the limiter decides by its failure
//	                                                policy because the store failed (from
//	                                                core.EventFallbackStart to EventFallbackEnd)
//	ratekit_rules_differ{policy}                    1 while other instances use the policy's name
//	                                                with another configuration
//	                                                (core.EventRulesDiffer)
//	ratekit_store_check_failures_total{policy,reason}  failed store checks (Limiter.Check); reason
//	                                                is misconfigured (core.ErrMisconfigured) or other
//
// A policy's series appear with its first event.
//
// # Alerts and dashboard
//
// [Rules] returns Prometheus alerting rules for what an operator must hear
// (a fallback episode under way, a breaker open, store errors, a
// misconfigured store, a failed store check, a spike of refusals), and
// [Dashboard] a Grafana dashboard of every series above. Both are tested
// against the series this package exports; docs/operations.md says what
// each alert means and what to do.
package ratekitprom
