// Command metrics serves a rate-limited endpoint with its limiter's
// metrics at /metrics, store failures logged through log/slog, and the
// ratekit admin handler for support staff:
//
//	go run ./examples/metrics
//	curl -i localhost:8080/hello              # 5 per 10 s per client IP, then 429
//	curl -s localhost:8080/metrics | grep ratekit_
//	ADMIN_TOKEN=s3cret go run ./examples/metrics
//	curl -s -H 'Authorization: Bearer s3cret' localhost:8080/admin/ratelimit/policies
//
// Limits live in memory; set REDIS_URL (redis://localhost:6379/0) to keep
// them in Redis. Stop Redis while it runs to see the fallback counters,
// the breaker gauge and one rate-limited log line per 10 s.
package main

import (
	"crypto/subtle"
	"flag"
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
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/exampleenv"
	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/nethttp"
	"github.com/ratekit/ratekit/opshttp"
	"github.com/ratekit/ratekit/ratekitprom"
	"github.com/ratekit/ratekit/ratekitslog"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	flag.Parse()

	h, err := newHandler(exampleenv.Store(), slog.Default(), os.Getenv("ADMIN_TOKEN"))
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("listening on %s: /hello is limited, /metrics shows ratekit_* metrics", *addr)
	srv := &http.Server{Addr: *addr, Handler: h, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}

// newHandler builds the example's routes on store. The admin handler is
// mounted only when adminToken is set.
func newHandler(store core.Store, logger *slog.Logger, adminToken string) (http.Handler, error) {
	metrics := ratekitprom.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	hello, err := core.NewLimiter(store, core.Policy{
		Name:  "hello",
		Rules: []core.Rule{{Limit: 5, Window: 10 * time.Second}},
	}, core.WithObserver(metrics), // decisions, store failures, breaker changes
		core.WithObserver(ratekitslog.New(logger, 10*time.Second))) // store failures, at most one line per 10 s
	if err != nil {
		return nil, err
	}

	mux := http.NewServeMux()
	// The middleware reports what only it knows (skips, bad keys).
	limit := nethttp.New(hello, guard.WithKey(keyfunc.ClientIP()), guard.WithObserver(metrics))
	mux.Handle("GET /hello", limit(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "hello\n")
	})))
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	if adminToken != "" {
		admin := opshttp.Handler([]*core.Limiter{hello})
		mux.Handle("/admin/ratelimit/", bearer(adminToken, http.StripPrefix("/admin/ratelimit", admin)))
	}
	return mux, nil
}

// bearer admits requests carrying "Authorization: Bearer <token>". A real
// app puts its own admin authentication here.
func bearer(token string, next http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}
