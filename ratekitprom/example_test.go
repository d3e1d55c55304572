package ratekitprom_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/nethttp"
	"github.com/ratekit/ratekit/ratekitprom"
)

func ExampleNew() {
	obs := ratekitprom.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(obs)

	login, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{Name: "login", Rules: []core.Rule{{Limit: 1, Window: time.Minute}}},
		core.WithObserver(obs))
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /login", nethttp.New(login, guard.WithObserver(obs))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "welcome\n")
	})))
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	for range 2 {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/login", nil))
		fmt.Println(rec.Code)
	}
	// Output:
	// 200
	// 429
}

func ExampleRules() {
	// The rule file for an observer made with WithNamespace("shop"), to
	// write where Prometheus's rule_files reads it.
	rules := ratekitprom.Rules("shop")
	for _, line := range strings.Split(string(rules), "\n") {
		if name, ok := strings.CutPrefix(strings.TrimSpace(line), "- alert: "); ok {
			fmt.Println(name)
		}
	}
	fmt.Println(strings.Contains(string(rules), "shop_fallback_active == 1"))
	// Output:
	// RatekitFallbackActive
	// RatekitRulesDiffer
	// RatekitBreakerOpen
	// RatekitStoreErrors
	// RatekitStoreMisconfigured
	// RatekitStoreCheckFailed
	// RatekitRefusalSpike
	// true
}

func ExampleDashboard() {
	// Serve the dashboard on an admin route, for Grafana's import.
	admin := http.NewServeMux()
	admin.HandleFunc("GET /ratekit/dashboard.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(ratekitprom.Dashboard(ratekitprom.DefaultNamespace))
	})

	rec := httptest.NewRecorder()
	admin.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ratekit/dashboard.json", nil))
	var dashboard struct {
		Title string `json:"title"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &dashboard); err != nil {
		log.Fatal(err)
	}
	fmt.Println(rec.Code, dashboard.Title)
	// Output: 200 ratekit
}
