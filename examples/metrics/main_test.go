package main

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfunc"
)

func TestExample(t *testing.T) {
	h, err := newHandler(core.NewMemoryStore(), slog.New(slog.NewTextHandler(io.Discard, nil)), "s3cret", keyfunc.ClientIP())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	get := func(path, auth string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}
	for i, want := range []int{200, 200, 200, 200, 200, 429, 429} {
		if got, _ := get("/hello", ""); got != want {
			t.Fatalf("request %d: status %d, want %d", i+1, got, want)
		}
	}
	status, body := get("/metrics", "")
	if status != 200 {
		t.Fatalf("/metrics: status %d", status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	counts := map[string]float64{}
	for _, m := range fams["ratekit_decisions_total"].GetMetric() {
		var labels []string
		for _, lp := range m.GetLabel() {
			labels = append(labels, lp.GetName()+"="+lp.GetValue())
		}
		counts[strings.Join(labels, ",")] = m.GetCounter().GetValue()
	}
	tests := []struct {
		labels string
		want   float64
	}{
		{"outcome=allowed,policy=metrics-hello,source=store", 5},
		// The in-memory store answers denials itself, without a deny cache.
		{"outcome=denied,policy=metrics-hello,source=store", 2},
	}
	for _, tc := range tests {
		if got := counts[tc.labels]; got != tc.want {
			t.Errorf("ratekit_decisions_total{%s} = %v, want %v", tc.labels, got, tc.want)
		}
	}
	if status, _ := get("/admin/ratelimit/policies", ""); status != http.StatusUnauthorized {
		t.Errorf("admin without token: status %d, want 401", status)
	}
	if status, body := get("/admin/ratelimit/policies", "Bearer s3cret"); status != 200 || !strings.Contains(body, `"name":"metrics-hello"`) {
		t.Errorf("admin with token: status %d body %s, want 200 listing hello", status, body)
	}
	if status, body := get("/admin/ratelimit/policies/metrics-hello/keys/127.0.0.1", "Bearer s3cret"); status != 200 || !strings.Contains(body, `"allowed":false`) {
		t.Errorf("admin peek of the client: status %d body %s, want 200, not allowed", status, body)
	}
	req, err := http.NewRequest(http.MethodDelete, srv.URL+"/admin/ratelimit/policies/metrics-hello/keys/127.0.0.1", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Errorf("admin reset of the client: status %d, want 204", resp.StatusCode)
	}
	if status, _ := get("/hello", ""); status != http.StatusOK {
		t.Errorf("/hello after the reset: status %d, want 200", status)
	}
}
