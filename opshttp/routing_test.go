package opshttp_test

import (
	"context"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/opshttp"
)

// noRedirects is a client that reports redirects instead of following
// them.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error {
	return http.ErrUseLastResponse
}}

// mounted serves h as the package documentation shows: on an app's
// ServeMux, under a prefix stripped with http.StripPrefix.
func mounted(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/admin/ratelimit/", http.StripPrefix("/admin/ratelimit", h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// stripped serves h under http.StripPrefix alone, with no ServeMux in
// front to clean the path first.
func stripped(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.StripPrefix("/admin/ratelimit", h))
	t.Cleanup(srv.Close)
	return srv
}

type answer struct {
	status int
	header http.Header
	body   string
}

// send sends method to srv with the request target exactly as given
// (escapes and dot segments are not touched on the way).
func send(t *testing.T, srv *httptest.Server, method, target string) answer {
	t.Helper()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(method, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.URL = &url.URL{Scheme: u.Scheme, Host: u.Host, Opaque: "//" + u.Host + target}
	resp, err := noRedirects.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, resp.Header, string(body)}
}

func isJSON(a answer) bool {
	mt, _, _ := mime.ParseMediaType(a.header.Get("Content-Type"))
	return mt == "application/json" && json.Valid([]byte(a.body))
}

// TestDotKeys: keys "." and ".." are keys like any other. http.ServeMux
// would clean them away with a 307 whose Location drops the mount prefix,
// sending a DELETE outside the authenticated mount.
func TestDotKeys(t *testing.T) {
	ctx := context.Background()
	for _, key := range []string{".", "..", "...", "a/..", "../a", "%2E", "/"} {
		t.Run(key, func(t *testing.T) {
			l := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "login", Rules: []core.Rule{{Limit: 1, Window: time.Hour}}})
			if _, err := l.Allow(ctx, key); err != nil {
				t.Fatal(err)
			}
			h := opshttp.Handler([]*core.Limiter{l}, anyone)
			escaped := url.PathEscape(key) // leaves dots alone
			encoded := escapeAll(key)      // %2E%2E
			for _, tc := range []struct {
				name   string
				srv    *httptest.Server
				target string
			}{
				{"StripPrefix, url.PathEscape", stripped(t, h), "/admin/ratelimit/policies/login/keys/" + escaped},
				{"StripPrefix, all escaped", stripped(t, h), "/admin/ratelimit/policies/login/keys/" + encoded},
				// A ServeMux in front cleans literal dot segments itself,
				// keeping the prefix; escaped ones pass.
				{"ServeMux and StripPrefix, all escaped", mounted(t, h), "/admin/ratelimit/policies/login/keys/" + encoded},
			} {
				if _, err := l.Allow(ctx, key); err != nil {
					t.Fatal(err)
				}
				a := send(t, tc.srv, "GET", tc.target)
				var st opshttp.KeyState
				if a.status != 200 || json.Unmarshal([]byte(a.body), &st) != nil || st.Allowed {
					t.Fatalf("%s: GET %s = %d %s %s; want 200 and the key's state (denied)", tc.name, tc.target, a.status, a.header.Get("Location"), a.body)
				}
				if a := send(t, tc.srv, "DELETE", tc.target); a.status != http.StatusNoContent {
					t.Fatalf("%s: DELETE %s = %d %s %s; want 204", tc.name, tc.target, a.status, a.header.Get("Location"), a.body)
				}
				if d, err := l.Peek(ctx, key); err != nil || !d.Allowed {
					t.Fatalf("%s: after DELETE %s, Peek(%q) = %+v, %v; want the key reset", tc.name, tc.target, key, d, err)
				}
			}
		})
	}
}

// escapeAll percent-encodes every byte of s.
func escapeAll(s string) string {
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, 3*len(s))
	for i := 0; i < len(s); i++ {
		b = append(b, '%', hex[s[i]>>4], hex[s[i]&15])
	}
	return string(b)
}

// TestNoRedirectsAndJSONErrors: no path gets a redirect, and unknown
// routes and wrong methods answer JSON, 405 with an Allow header.
func TestNoRedirectsAndJSONErrors(t *testing.T) {
	l := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "login", Rules: []core.Rule{{Limit: 1, Window: time.Hour}}})
	h := opshttp.Handler([]*core.Limiter{l}, anyone)
	for _, mount := range []struct {
		name string
		srv  *httptest.Server
	}{{"StripPrefix", stripped(t, h)}, {"ServeMux and StripPrefix", mounted(t, h)}} {
		tests := []struct {
			method     string
			path       string // under /admin/ratelimit
			wantStatus int
			wantAllow  string
			// stripOnly: a ServeMux in front cleans this path itself
			// (with a redirect that keeps the prefix).
			stripOnly bool
		}{
			{"GET", "/", 404, "", false},
			{"GET", "", 404, "", true},
			{"GET", "/nope", 404, "", false},
			{"GET", "/policies/", 404, "", false},
			{"GET", "/policies/login/", 404, "", false},
			{"GET", "/policies/login/keys", 404, "", false},
			{"GET", "/policies/login/keys/a/b", 404, "", false},
			{"GET", "/policies//keys/a", 404, "", true},
			{"GET", "/policies/login/keys/", 400, "", false},
			{"POST", "/policies", 405, "GET, HEAD", false},
			{"DELETE", "/policies/login", 405, "GET, HEAD", false},
			{"PUT", "/policies/login/keys/alice", 405, "GET, HEAD, DELETE", false},
			{"POST", "/policies/nope/keys/alice", 405, "GET, HEAD, DELETE", false},
			{"DELETE", "/policies/login/keys/alice/", 404, "", false},
		}
		for _, tc := range tests {
			if tc.stripOnly && mount.name != "StripPrefix" {
				continue
			}
			t.Run(mount.name+" "+tc.method+" "+tc.path, func(t *testing.T) {
				a := send(t, mount.srv, tc.method, "/admin/ratelimit"+tc.path)
				if a.status != tc.wantStatus || !isJSON(a) {
					t.Errorf("%s %s = %d %q %s; want %d with a JSON body", tc.method, tc.path, a.status, a.header.Get("Content-Type"), a.body, tc.wantStatus)
				}
				if got := a.header.Get("Allow"); got != tc.wantAllow {
					t.Errorf("%s %s: Allow %q, want %q", tc.method, tc.path, got, tc.wantAllow)
				}
			})
		}
	}
}

// anyone is the authorization of tests that do not test it: it admits
// every request.
var anyone = opshttp.WithAuthorization(func(h http.Handler) http.Handler { return h })
