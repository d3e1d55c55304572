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

	"github.com/chromedp/chromedp"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/opshttp"
)

// challenged returns a limiter of policy "login" (5 per 15 minutes, a
// challenge at the 2nd) whose key "alice" is challenged, and "bob", who
// has used nothing, not.
func challenged(t *testing.T) *core.Limiter {
	t.Helper()
	l := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "login",
		Rules: []core.Rule{{Limit: 5, Window: 15 * time.Minute, Challenge: 2}}})
	ctx := context.Background()
	for _, key := range []string{"alice", "alice"} {
		if _, err := l.Allow(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	if d, _ := l.Peek(ctx, "alice"); !d.Challenged {
		t.Fatalf("Peek(alice) = %+v, want challenged", d)
	}
	return l
}

// A challenged key says so in the JSON: "challenged": true, with no wait
// that would lift it; another key has no such field.
func TestPeekChallenged(t *testing.T) {
	t.Parallel()
	srv := mounted(t, opshttp.Handler([]*core.Limiter{challenged(t)}, anyone))
	for _, tc := range []struct {
		key  string
		want string
	}{
		{"alice", `"allowed":false,`},
		{"bob", `"allowed":true,`},
	} {
		resp, err := http.Get(srv.URL + "/admin/ratelimit/policies/login/keys/" + tc.key)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var st opshttp.KeyState
		if err := json.Unmarshal(body, &st); err != nil {
			t.Fatal(err)
		}
		wantChallenged := tc.key == "alice"
		if st.Challenged != wantChallenged || st.Allowed == wantChallenged || st.RetryAfterSeconds != 0 ||
			strings.Contains(string(body), `"challenged"`) != wantChallenged {
			t.Errorf("peek of %s: %s; want challenged %v, allowed %v, retry_after_seconds 0", tc.key, body, wantChallenged, !wantChallenged)
		}
	}
}

// pageOf serves the operations page of limiters under /admin/ops/.
func pageOf(t *testing.T, limiters ...*core.Limiter) *httptest.Server {
	t.Helper()
	page, err := opshttp.NewPage(limiters, anyone)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/admin/ops/", http.StripPrefix("/admin/ops", page))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// The page says a challenged key is challenged, and how it goes on,
// rather than "Refused: may retry at" now.
func TestPageChallenged(t *testing.T) {
	t.Parallel()
	srv := pageOf(t, challenged(t))
	resp, err := http.Get(srv.URL + "/admin/ops/?as=key&q=alice")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	s := section(t, string(body), "login")
	if !strings.Contains(s, `<p class="status challenged">Challenged: the next request must first pass the app's challenge`) ||
		strings.Contains(s, "Refused") {
		t.Errorf("alice's section:\n%s", s)
	}
}

// In a browser, the challenged state shows in its own colour, and a link
// that only claims a reset (?reset=login) shows no "Reset under".
func TestPageChallengedInBrowser(t *testing.T) {
	ctx := browser(t)
	srv := pageOf(t, challenged(t))
	status := `section[data-policy="login"] p.status`
	var flashes int
	if err := chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/admin/ops/?as=key&q=alice&reset=login"),
		chromedp.WaitVisible(chromedp.CSS(status)),
	); err != nil {
		t.Fatal(err)
	}
	got := text(t, ctx, status)
	color, err := chromedp.Run(ctx, chromedp.Evaluate[string](`getComputedStyle(document.querySelector('`+status+`')).color`))
	if err == nil {
		flashes, err = chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#flash').length`))
	}
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got, "Challenged: the next request must first pass the app's challenge") || color != "rgb(170, 85, 0)" || flashes != 0 {
		t.Errorf("alice's status %q in %s, %d flashes; want challenged, in rgb(170, 85, 0), no flash", got, color, flashes)
	}
}
