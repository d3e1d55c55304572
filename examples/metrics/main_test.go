package main

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
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

// TestOperationsPage: the page is behind the admin check (HTTP Basic for
// a browser); support looks the client up, resets it from the page's form,
// and the reset is logged.
func TestOperationsPage(t *testing.T) {
	var logs bytes.Buffer
	h, err := newHandler(core.NewMemoryStore(), slog.New(slog.NewTextHandler(&logs, nil)), "s3cret", keyfunc.ClientIP())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(method, path string, form url.Values, admin bool) (*http.Response, string) {
		t.Helper()
		var body io.Reader
		if form != nil {
			body = strings.NewReader(form.Encode())
		}
		req, err := http.NewRequest(method, srv.URL+path, body)
		if err != nil {
			t.Fatal(err)
		}
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		if admin {
			req.SetBasicAuth("admin", "s3cret")
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, string(b)
	}

	for range 6 {
		do("GET", "/hello", nil, false)
	}
	if resp, _ := do("GET", "/admin/ops/", nil, false); resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic ") {
		t.Fatalf("page without credentials: %d %q; want 401 with a Basic challenge", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	resp, page := do("GET", "/admin/ops/?q=127.0.0.1", nil, true)
	if resp.StatusCode != 200 || !strings.Contains(page, `data-policy="metrics-hello"`) || !strings.Contains(page, "Refused: may retry at") {
		t.Fatalf("lookup of the client: %d\n%s", resp.StatusCode, page)
	}
	m := regexp.MustCompile(`name="csrf" value="([A-Z2-7]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no reset form on the page:\n%s", page)
	}
	form := url.Values{"csrf": {m[1]}, "policy": {"metrics-hello"}, "q": {"127.0.0.1"}, "as": {"id"}}
	if resp, body := do("POST", "/admin/ops/reset", form, true); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("reset from the page: %d\n%s", resp.StatusCode, body)
	}
	if resp, _ := do("GET", "/hello", nil, false); resp.StatusCode != http.StatusOK {
		t.Errorf("/hello after the reset: %d, want 200", resp.StatusCode)
	}
	if !strings.Contains(logs.String(), `msg="ratekit: key reset from the operations page" policy=metrics-hello failed=false`) {
		t.Errorf("log:\n%s\nwant the reset", logs.String())
	}
}
