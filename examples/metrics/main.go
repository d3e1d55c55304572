// Command metrics serves a rate-limited endpoint with its limiter's
// metrics at /metrics, store failures logged through log/slog, and the
// ratekit admin handler and operations page for support staff:
//
//	ADMIN_TOKEN=s3cret go run ./examples/metrics
//	for i in 1 2 3 4 5 6; do curl -s -o /dev/null -w '%{http_code} ' localhost:8087/hello; done   # 200 ×5, then 429
//	curl -s localhost:8087/metrics | grep '^ratekit_decisions_total'
//	curl -s -H 'Authorization: Bearer s3cret' localhost:8087/admin/ratelimit/policies
//	curl -s -H 'Authorization: Bearer s3cret' localhost:8087/admin/ratelimit/policies/metrics-hello/keys/127.0.0.1
//	curl -s -X DELETE -H 'Authorization: Bearer s3cret' -w '%{http_code}\n' localhost:8087/admin/ratelimit/policies/metrics-hello/keys/127.0.0.1   # 204: unlocked
//
// The operations page is at http://localhost:8087/admin/ops/ (user admin,
// the token as password): look up 127.0.0.1 and reset it; each reset is
// logged. Without ADMIN_TOKEN the admin routes are not mounted. Flags: -addr
// (127.0.0.1:8087), -trusted-proxy CIDR[,CIDR] and -failure-policy
// local|open|closed, as in every example. Limits live in memory; set
// REDIS_URL (redis://127.0.0.1:6379/0) to keep them in Redis. Stop Redis
// while it runs to see the fallback counters, the breaker gauge and one
// rate-limited log line per 10 s.
package main

import (
	"context"
	"crypto/subtle"
	"io"
	"log"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/examples/internal/exampleenv"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/nethttp"
	"github.com/ratekit/ratekit/opshttp"
	"github.com/ratekit/ratekit/ratekitprom"
	"github.com/ratekit/ratekit/ratekitslog"
)

func main() {
	flags := exampleenv.Parse("127.0.0.1:8087", exampleenv.ByIP)
	// This example attaches its log observer itself, in newHandler.
	h, err := newHandler(exampleenv.Store(), slog.Default(), os.Getenv("ADMIN_TOKEN"), flags.ClientIP, core.WithFailurePolicy(flags.Failure))
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("listening on %s: /hello is limited, /metrics shows ratekit_* metrics", flags.Addr)
	srv := &http.Server{Addr: flags.Addr, Handler: h, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}

// newHandler builds the example's routes on store, keyed by clientIP. The
// admin handler is mounted only when adminToken is set.
func newHandler(store core.Store, logger *slog.Logger, adminToken string, clientIP keyfunc.Func, opts ...core.Option) (http.Handler, error) {
	metrics := ratekitprom.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	hello, err := core.NewLimiter(store, core.Policy{
		Name:  "metrics-hello",
		Rules: []core.Rule{{Limit: 5, Window: 10 * time.Second}},
	}, append(opts,
		core.WithObserver(metrics),                                 // decisions, store failures, breaker changes
		core.WithObserver(ratekitslog.New(logger, 10*time.Second)), // store failures and fallbacks, at most one line per 10 s
	)...)
	if err != nil {
		return nil, err
	}

	mux := http.NewServeMux()
	// The middleware reports what only it knows (skips, bad keys).
	limit := nethttp.New(hello, guard.WithKey(clientIP), guard.WithObserver(metrics))
	mux.Handle("GET /hello", limit(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "hello\n")
	})))
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	if adminToken != "" {
		requireAdmin := admin(adminToken)
		api := opshttp.Handler([]*core.Limiter{hello}, opshttp.WithAuthorization(requireAdmin))
		mux.Handle("/admin/ratelimit/", http.StripPrefix("/admin/ratelimit", api))
		page, err := opshttp.NewPage([]*core.Limiter{hello},
			opshttp.WithAuthorization(requireAdmin),
			opshttp.WithObserver(core.ObserverFunc(func(ctx context.Context, e core.Event) {
				if e.Kind == opshttp.EventReset { // an audit line per reset
					logger.InfoContext(ctx, "ratekit: key reset from the operations page", "policy", e.Policy, "failed", e.Err != nil)
				}
			})))
		if err != nil {
			return nil, err
		}
		mux.Handle("/admin/ops/", http.StripPrefix("/admin/ops", page))
	}
	return mux, nil
}

// admin returns the example's admin check: it admits requests carrying
// "Authorization: Bearer <token>", or HTTP Basic credentials with user
// "admin" and the token as password, which a browser asks for. A real app
// puts its own admin authentication here.
func admin(token string) func(http.Handler) http.Handler {
	bearer := []byte("Bearer " + token)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			user, pass, basic := r.BasicAuth()
			ok := subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), bearer) == 1 ||
				basic && subtle.ConstantTimeCompare([]byte(user+":"+pass), []byte("admin:"+token)) == 1
			if !ok {
				w.Header().Set("WWW-Authenticate", `Basic realm="ratekit admin", charset="UTF-8"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}
