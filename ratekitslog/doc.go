// Package ratekitslog logs ratekit's store failures, circuit-breaker
// changes and the start and end of decisions by the failure policy
// through log/slog, rate-limited so that an outage does not flood
// the log: per policy, at most one line per interval for each kind of
// event, carrying the number of events left out since the previous line.
//
//	obs := ratekitslog.New(slog.Default(), 10*time.Second)
//	l, err := core.NewLimiter(store, policy, core.WithObserver(obs))
//
// Decisions, skips and key errors are not logged: they are the normal
// traffic of a limiter (export them as metrics with ratekitprom or
// ratekitotel). Keys are never logged; they may be personal data.
package ratekitslog
