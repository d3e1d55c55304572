// Package ratekit is the front door of ratekit, rate limiting for Go
// services: exact sliding windows (and calendar quotas, lockouts,
// challenges, concurrency leases) in memory or in Redis, shared by every
// instance of an app, with one line of middleware for net/http, Gin, Echo,
// Fiber v2 and gRPC. This package holds no code; it maps the others.
//
// What an app imports, by what it does:
//
//   - Limit requests with one line: [github.com/ratekit/ratekit/nethttp],
//     [github.com/ratekit/ratekit/ginlimit],
//     [github.com/ratekit/ratekit/echolimit],
//     [github.com/ratekit/ratekit/fiberlimit],
//     [github.com/ratekit/ratekit/grpclimit]: each adapter's LimitByIP,
//     LimitByUser and LimitByKey, and its middleware on a limiter of your
//     own. What they share (skips, costs, answers, headers, dry runs) is
//     [github.com/ratekit/ratekit/guard].
//   - Say who is limited: [github.com/ratekit/ratekit/keyfunc] (client IP
//     behind trusted proxies, headers, AppKeys, request bodies) and
//     [github.com/ratekit/ratekit/keyfunc/personal] (phone numbers and
//     accounts, as pseudonyms).
//   - Decide in code, any job: [github.com/ratekit/ratekit/core], the app's
//     vocabulary (Limiter, Policy, Rule, Decision, Observer) and the
//     in-memory store.
//   - Share the limits between instances on Redis:
//     [github.com/ratekit/ratekit/redisstore] on go-redis, or
//     [github.com/ratekit/ratekit/rueidisstore] on rueidis; one Redis, one
//     layout, either driver.
//   - Watch and operate: [github.com/ratekit/ratekit/ratekitprom]
//     (Prometheus metrics, alerting rules, a Grafana dashboard),
//     [github.com/ratekit/ratekit/ratekitotel] (OpenTelemetry),
//     [github.com/ratekit/ratekit/ratekitslog] (log/slog),
//     [github.com/ratekit/ratekit/opshttp] (an operations page: look a key
//     up, reset it) and the ratekit command (cmd/ratekit).
//   - Test an app's limits: [github.com/ratekit/ratekit/ratekittest], a
//     store on a clock the test moves.
//   - Write a store driver: [github.com/ratekit/ratekit/core/driver], the
//     contract, and [github.com/ratekit/ratekit/core/driver/drivertest],
//     the conformance suite every store passes.
//
// The names follow what each package is used with. An adapter is named
// after its framework with "limit" (ginlimit, echolimit, fiberlimit,
// grpclimit), so that it reads apart from the framework's own package in
// an import list; nethttp's framework is the standard library, whose
// package name (http) it must not take. A store is named after what it
// stores in: redisstore, and rueidisstore after its client. An observer
// is named "ratekit" and its backend (ratekitprom, ratekitotel,
// ratekitslog), so that it reads apart from the backend's own package, as
// does the test kit (ratekittest, after net/http/httptest). The rest say
// their role: core, guard, keyfunc, opshttp.
package ratekit
