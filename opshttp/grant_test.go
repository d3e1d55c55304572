package opshttp_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/opshttp"
)

func sendGrant(t *testing.T, method, url, contentType, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
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

// TestGrantRoutes: POST .../grant gives a key more units (or exempts it),
// the peek shows the grant and the raised limit, the limiter admits the
// granted units, DELETE revokes it; malformed, cross-site-shaped and
// listed-key grants are refused with the reason.
func TestGrantRoutes(t *testing.T) {
	api := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "api", Rules: []core.Rule{{Limit: 2, Window: time.Hour}},
		Deny: []string{"203.0.113.0/24"}})
	srv := httptest.NewServer(opshttp.Handler([]*core.Limiter{api}, anyone))
	t.Cleanup(srv.Close)
	ctx := context.Background()
	base := srv.URL + "/policies/api/keys/acme/grant"

	status, body := sendGrant(t, http.MethodPost, base, "application/json", `{"extra": 3, "for": "1h", "by": "ann", "note": "launch"}`)
	var g opshttp.GrantState
	if status != http.StatusOK || json.Unmarshal([]byte(body), &g) != nil || g.Extra != 3 || g.By != "ann" || g.Note != "launch" {
		t.Fatalf("POST grant = %d %s, want 200 with the grant", status, body)
	}
	until, err := time.Parse(time.RFC3339, g.Until)
	if err != nil || until.Before(time.Now().Add(59*time.Minute)) || until.After(time.Now().Add(61*time.Minute)) {
		t.Fatalf("grant until %q, want an hour from now", g.Until)
	}
	status, body = sendGrant(t, http.MethodGet, srv.URL+"/policies/api/keys/acme", "", "")
	var ks opshttp.KeyState
	if status != http.StatusOK || json.Unmarshal([]byte(body), &ks) != nil || ks.Grant == nil || ks.Grant.Extra != 3 || ks.Grant.By != "ann" || ks.Limit != 5 || ks.Remaining != 5 {
		t.Fatalf("peek after the grant = %d %s, want the grant, limit 5, remaining 5", status, body)
	}
	admitted := 0
	for range 8 {
		if d, _ := api.Allow(ctx, "acme"); d.Allowed {
			admitted++
		}
	}
	if admitted != 5 {
		t.Fatalf("admitted %d with 3 more than 2, want 5", admitted)
	}
	if status, body = sendGrant(t, http.MethodDelete, base+"?by=bob", "", ""); status != http.StatusNoContent {
		t.Fatalf("DELETE grant = %d %s, want 204", status, body)
	}
	if status, body = sendGrant(t, http.MethodGet, srv.URL+"/policies/api/keys/acme", "", ""); status != http.StatusOK || strings.Contains(body, `"grant"`) || !strings.Contains(body, `"limit":2`) {
		t.Fatalf("peek after the revocation = %d %s, want no grant, limit 2", status, body)
	}
	status, body = sendGrant(t, http.MethodPost, srv.URL+"/policies/api/keys/ops/grant", "application/json", `{"exempt": true, "until": "`+time.Now().Add(time.Hour).UTC().Format(time.RFC3339)+`"}`)
	if status != http.StatusOK || !strings.Contains(body, `"exempt":true`) {
		t.Fatalf("POST exempt grant = %d %s, want 200", status, body)
	}

	for _, tc := range []struct {
		name, method, path, contentType, body string
		status                                int
		want                                  string
	}{
		{"a form post", http.MethodPost, "/policies/api/keys/acme/grant", "application/x-www-form-urlencoded", "extra=3&for=1h", http.StatusUnsupportedMediaType, "application/json"},
		{"a text post", http.MethodPost, "/policies/api/keys/acme/grant", "text/plain", `{"extra":3,"for":"1h"}`, http.StatusUnsupportedMediaType, "application/json"},
		{"no duration", http.MethodPost, "/policies/api/keys/acme/grant", "application/json", `{"extra":3}`, http.StatusBadRequest, "for or until"},
		{"both durations", http.MethodPost, "/policies/api/keys/acme/grant", "application/json", `{"extra":3,"for":"1h","until":"2099-01-01T00:00:00Z"}`, http.StatusBadRequest, "not both"},
		{"past", http.MethodPost, "/policies/api/keys/acme/grant", "application/json", `{"extra":3,"until":"2001-01-01T00:00:00Z"}`, http.StatusBadRequest, "time to come"},
		{"unknown field", http.MethodPost, "/policies/api/keys/acme/grant", "application/json", `{"extra":3,"for":"1h","limit":9}`, http.StatusBadRequest, "malformed"},
		{"negative", http.MethodPost, "/policies/api/keys/acme/grant", "application/json", `{"extra":-3,"for":"1h"}`, http.StatusBadRequest, "negative"},
		{"too long", http.MethodPost, "/policies/api/keys/acme/grant", "application/json", `{"extra":3,"for":"800h"}`, http.StatusBadRequest, "30 days"},
		{"a denied key", http.MethodPost, "/policies/api/keys/203.0.113.9/grant", "application/json", `{"exempt":true,"for":"1h"}`, http.StatusBadRequest, "Deny list"},
		{"unknown policy", http.MethodPost, "/policies/nope/keys/acme/grant", "application/json", `{"extra":3,"for":"1h"}`, http.StatusNotFound, ""},
		{"GET", http.MethodGet, "/policies/api/keys/acme/grant", "", "", http.StatusMethodNotAllowed, ""},
	} {
		status, body := sendGrant(t, tc.method, srv.URL+tc.path, tc.contentType, tc.body)
		if status != tc.status || !strings.Contains(body, tc.want) || strings.Contains(body, "acme") || strings.Contains(body, "203.0.113.9") {
			t.Errorf("%s: %s %s = %d %s, want %d naming %q, not the key", tc.name, tc.method, tc.path, status, body, tc.status, tc.want)
		}
	}
	if d, err := api.Peek(ctx, "acme"); err != nil || d.Grant != nil {
		t.Errorf("after the refused grants: Peek = %+v (grant %+v), %v; want no grant", d, d.Grant, err)
	}
}
