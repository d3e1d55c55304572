package opshttp_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/keyfunc/personal"
	"github.com/ratekit/ratekit/opshttp"
)

// pageFixture is an app with a login limit per account (pseudonyms, with
// a lockout), one per IP (stored keys), a calendar quota and a limit
// whose store always fails, and the page mounted under /admin/ops/.
type pageFixture struct {
	srv                       *httptest.Server
	account, ip, api, broken  *core.Limiter
	aliceKey                  string
	obs                       *recorded
	client, bare              *http.Client // with and without a cookie jar
	accountOpts               []personal.Option
	paris                     *time.Location
	lockoutFor, lockoutWindow time.Duration
}

func newPageFixture(t *testing.T, opts ...opshttp.Option) *pageFixture {
	t.Helper()
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	f := &pageFixture{obs: &recorded{}, paris: paris, lockoutFor: time.Hour, lockoutWindow: 15 * time.Minute,
		accountOpts: []personal.Option{personal.Secret([]byte("app secret"))}}
	store := core.NewMemoryStore()
	f.account = testkit.Limiter(t, store, core.Policy{Name: "login-account", Rules: []core.Rule{{Limit: 2, Window: f.lockoutWindow}},
		Lockout: core.Lockout{For: f.lockoutFor, Max: 24 * time.Hour}})
	f.ip = testkit.Limiter(t, store, core.Policy{Name: "login-ip", Rules: []core.Rule{{Limit: 2, Window: time.Hour}}})
	f.api = testkit.Limiter(t, store, core.Policy{Name: "api", Rules: []core.Rule{{Limit: 10, Window: time.Second}, {Limit: 1000, Calendar: core.Month, Location: paris}}})
	f.broken = testkit.Limiter(t, testkit.FailingStore{Err: errSecret}, core.Policy{Name: "broken", Rules: []core.Rule{{Limit: 1, Window: time.Second}}})
	f.aliceKey, err = personal.AccountKey("alice@example.com", f.accountOpts...)
	if err != nil {
		t.Fatal(err)
	}
	opts = append([]opshttp.Option{
		opshttp.WithAuthorization(testAuth),
		opshttp.WithObserver(f.obs),
		opshttp.WithKeyer("login-account", func(id string) (string, error) { return personal.AccountKey(id, f.accountOpts...) }),
	}, opts...)
	page, err := opshttp.NewPage([]*core.Limiter{f.account, f.ip, f.api, f.broken}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/admin/ops/", http.StripPrefix("/admin/ops", page))
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	noFollow := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	f.client = &http.Client{Jar: jar, Timeout: 10 * time.Second, CheckRedirect: noFollow}
	f.bare = &http.Client{Timeout: 10 * time.Second, CheckRedirect: noFollow}
	t.Cleanup(f.client.CloseIdleConnections)
	t.Cleanup(f.bare.CloseIdleConnections)
	return f
}

// lockOut makes l refuse key (and lock it out under a lockout policy).
func lockOut(t *testing.T, l *core.Limiter, key string) {
	t.Helper()
	ctx := context.Background()
	for range 3 {
		if _, err := l.Allow(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	if d, _ := l.Peek(ctx, key); d.Allowed {
		t.Fatalf("%s %q not refused", l.Policy().Name, key)
	}
}

// do sends a request to the page as an operator and returns the answer;
// header pairs are set on it. It goes with the fixture's cookie jar,
// unless a pair is "Cookie": then with that header alone.
func (f *pageFixture) do(t *testing.T, method, target string, form url.Values, header ...string) answer {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, f.srv.URL+target, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	req.Header.Set("Authorization", "Bearer s3cret")
	req.Header.Set("X-Operator", "carol")
	client := f.client
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
		if header[i] == "Cookie" {
			client = f.bare
		}
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
	return answer{resp.StatusCode, resp.Header, string(b)}
}

var (
	tokenRE = regexp.MustCompile(`name="csrf" value="([A-Z2-7]+)"`)
	timeRE  = regexp.MustCompile(`<time(?: class="end")? datetime="([^"]+)">`)
)

// token returns the form token of a page the fixture's client got.
func token(t *testing.T, page string) string {
	t.Helper()
	m := tokenRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no form token in the page:\n%s", page)
	}
	return m[1]
}

// section returns the part of page about policy.
func section(t *testing.T, page, policy string) string {
	t.Helper()
	_, rest, ok := strings.Cut(page, `<section class="policy" data-policy="`+policy+`">`)
	if !ok {
		t.Fatalf("no section for %s in the page:\n%s", policy, page)
	}
	s, _, _ := strings.Cut(rest, "</section>")
	return s
}

// times returns the instants of the <time> elements of s.
func times(t *testing.T, s string) []time.Time {
	t.Helper()
	var out []time.Time
	for _, m := range timeRE.FindAllStringSubmatch(s, -1) {
		at, err := time.Parse(time.RFC3339, html.UnescapeString(m[1]))
		if err != nil {
			t.Fatalf("datetime %q: %v", m[1], err)
		}
		out = append(out, at)
	}
	return out
}

func near(got, want time.Time) bool {
	return got.Sub(want).Abs() <= 2*time.Second
}

func TestNewPageNeedsAuthorization(t *testing.T) {
	l := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "p", Rules: []core.Rule{{Limit: 1, Window: time.Second}}})
	auth := opshttp.WithAuthorization(testAuth)
	f := func(id string) (string, error) { return id, nil }
	for _, tc := range []struct {
		name     string
		limiters []*core.Limiter
		opts     []opshttp.Option
		want     string
	}{
		{"no authorization", []*core.Limiter{l}, nil, "WithAuthorization"},
		{"nil authorization", []*core.Limiter{l}, []opshttp.Option{opshttp.WithAuthorization(nil)}, "WithAuthorization"},
		{"authorization returning nil", []*core.Limiter{l}, []opshttp.Option{opshttp.WithAuthorization(func(http.Handler) http.Handler { return nil })}, "WithAuthorization"},
		{"nil limiter", []*core.Limiter{nil}, []opshttp.Option{auth}, "nil *core.Limiter"},
		{"two limiters of a policy", []*core.Limiter{l, l}, []opshttp.Option{auth}, "two limiters for policy p"},
		{"keyer of no policy", []*core.Limiter{l}, []opshttp.Option{auth, opshttp.WithKeyer("q", f)}, `WithKeyer("q")`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := opshttp.NewPage(tc.limiters, tc.opts...)
			if err == nil || p != nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "ratekit: opshttp: ") {
				t.Errorf("NewPage = %v, %v; want an error naming %s", p, err, tc.want)
			}
		})
	}
}

// TestPageAuthorization: every route of the page is behind the app's
// check, which answers refused requests itself; a refused reset resets
// nothing.
func TestPageAuthorization(t *testing.T) {
	f := newPageFixture(t)
	lockOut(t, f.ip, "192.0.2.1")
	form := url.Values{"policy": {"login-ip"}, "q": {"192.0.2.1"}, "csrf": {"AAAAAAAAAAAAAAAAAAAAAAAAAA"}}
	for _, tc := range []struct {
		method, target string
		form           url.Values
	}{
		{"GET", "/admin/ops/", nil},
		{"GET", "/admin/ops/?q=192.0.2.1", nil},
		{"POST", "/admin/ops/reset", form},
		{"GET", "/admin/ops/nope", nil},
	} {
		a := f.do(t, tc.method, tc.target, tc.form, "Authorization", "Bearer wrong")
		if a.status != http.StatusUnauthorized || strings.Contains(a.body, "login-ip") {
			t.Errorf("%s %s without authorization = %d %q; want the app's 401", tc.method, tc.target, a.status, a.body)
		}
	}
	if d, _ := f.ip.Peek(context.Background(), "192.0.2.1"); d.Allowed {
		t.Error("a refused reset reset the key")
	}
	if ev, _ := f.obs.take(); len(ev) != 0 {
		t.Errorf("observers saw %+v; want nothing", ev)
	}
}

// TestPageLookup: one value is looked up under every policy, through the
// policy's keyer where it has one; the page shows each rule's usage, the
// lockout and the calendar period with their ends.
func TestPageLookup(t *testing.T) {
	f := newPageFixture(t)
	ctx := context.Background()
	lockOut(t, f.account, f.aliceKey)
	for range 3 {
		if _, err := f.api.Allow(ctx, "Alice@Example.com"); err != nil {
			t.Fatal(err)
		}
	}
	before := time.Now()
	a := f.do(t, "GET", "/admin/ops/?q="+url.QueryEscape(" Alice@Example.COM "), nil)
	if a.status != 200 || !strings.HasPrefix(a.header.Get("Content-Type"), "text/html") {
		t.Fatalf("lookup = %d %q\n%s", a.status, a.header.Get("Content-Type"), a.body)
	}

	acc := section(t, a.body, "login-account")
	for _, want := range []string{
		"2 per 15m · SlidingLog · locks out for 1h, doubling up to 24h · takes an identifier",
		"Key <code>" + f.aliceKey + "</code> (derived by the policy's keyer)",
		`<p class="status locked">Locked out until`,
		`<tr class="full"><td>2 per 15m</td><td>2</td><td>0</td>`,
		`<button type="submit">Lift lockout</button>`,
		"forgets the key's counts under login-account, and its lockout, on every instance",
	} {
		if !strings.Contains(acc, want) {
			t.Errorf("login-account section lacks %q:\n%s", want, acc)
		}
	}
	if ts := times(t, acc); len(ts) != 2 || !near(ts[0], before.Add(f.lockoutFor)) || !near(ts[1], before.Add(f.lockoutWindow)) {
		t.Errorf("login-account times %v; want the lockout's end in 1h, the window's in 15m", ts)
	}

	// The calendar rule's period: this month in Paris.
	api := section(t, a.body, "api")
	now := time.Now().In(f.paris)
	start := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, f.paris)
	end := start.AddDate(0, 1, 0)
	for _, want := range []string{
		"10 per 1s, 1000 per month (Europe/Paris) · SlidingLog · takes the stored key",
		"Key <code> Alice@Example.COM </code></p>", // no keyer: the value exactly as given
		`<p class="status ok">Admitted`,
		`<td>1000 per month (Europe/Paris)</td><td>0</td><td>1000</td>`,
		`<button type="submit">Reset key</button>`,
		"forgets the key's counts under api on every instance",
	} {
		if !strings.Contains(api, want) {
			t.Errorf("api section lacks %q:\n%s", want, api)
		}
	}
	if ts := times(t, api); len(ts) != 2 || !ts[0].Equal(start) || !ts[1].Equal(end) {
		t.Errorf("api period %v; want %v to %v", ts, start, end)
	}

	if ip := section(t, a.body, "login-ip"); !strings.Contains(ip, `<p class="status ok">`) || !strings.Contains(ip, "<td>2 per 1h</td><td>0</td><td>2</td><td>empty</td>") {
		t.Errorf("login-ip section of an unknown key:\n%s", ip)
	}
	if b := section(t, a.body, "broken"); !strings.Contains(b, "The store did not answer") || strings.Contains(b, "hunter2") {
		t.Errorf("broken section:\n%s", b)
	}

	// As a stored key, the pseudonym finds alice; an identifier the
	// keyer refuses is said so under that policy alone.
	a = f.do(t, "GET", "/admin/ops/?as=key&q="+url.QueryEscape(f.aliceKey), nil)
	if acc := section(t, a.body, "login-account"); !strings.Contains(acc, "Locked out until") || strings.Contains(acc, "derived") {
		t.Errorf("lookup of the stored key:\n%s", acc)
	}
	a = f.do(t, "GET", "/admin/ops/?q=+", nil)
	if acc := section(t, a.body, "login-account"); !strings.Contains(acc, "Not looked up: invalid account name.") || strings.Contains(acc, "<form") {
		t.Errorf("lookup of a blank account:\n%s", acc)
	}
	if ip := section(t, a.body, "login-ip"); !strings.Contains(ip, "Key <code> </code>") {
		t.Errorf("lookup of a blank key under login-ip:\n%s", ip)
	}

	// Looking changes nothing and reports nothing.
	if d, _ := f.api.Peek(ctx, "Alice@Example.com"); d.Rules()[0].Used != 3 {
		t.Errorf("after the lookups, api holds %+v; want the 3 units used", d.Rules())
	}
	if ev, _ := f.obs.take(); len(ev) != 0 {
		t.Errorf("lookups reported %+v", ev)
	}
}

// TestPageReset: a reset needs the page's form token, from the page's
// origin; it is reported to the observers with the operator's context,
// and answered with a redirect to the lookup.
func TestPageReset(t *testing.T) {
	f := newPageFixture(t)
	ctx := context.Background()
	lockOut(t, f.account, f.aliceKey)
	page := f.do(t, "GET", "/admin/ops/?q=alice@example.com", nil)
	tok := token(t, page.body)
	good := url.Values{"csrf": {tok}, "policy": {"login-account"}, "q": {"alice@example.com"}, "as": {"id"}}
	with := func(k, v string) url.Values {
		u := url.Values{}
		for k, vs := range good {
			u[k] = vs
		}
		if v == "" {
			u.Del(k)
		} else {
			u.Set(k, v)
		}
		return u
	}

	refused := []struct {
		name   string
		form   url.Values
		header []string
		status int
		reason string
	}{
		{"no token", with("csrf", ""), nil, 403, "missing or stale form token"},
		{"wrong token", with("csrf", "AAAAAAAAAAAAAAAAAAAAAAAAAA"), nil, 403, "missing or stale form token"},
		{"no cookie", good, []string{"Cookie", ""}, 403, "missing or stale form token"},
		{"cookie of another token", good, []string{"Cookie", "ratekit_ops_csrf=ABCDEFGHIJKLMNOPQRSTUVWXYZ"}, 403, "missing or stale form token"},
		// A pair planted by another origin (a sibling subdomain can set
		// cookies) matches, but the browser says where the form is from.
		{"planted cookie and token", with("csrf", "ABCDEFGHIJKLMNOPQRSTUVWXYZ"),
			[]string{"Cookie", "ratekit_ops_csrf=ABCDEFGHIJKLMNOPQRSTUVWXYZ", "Origin", "http://evil.example.com"}, 403, "cross-origin request refused"},
		{"cross-site", good, []string{"Sec-Fetch-Site", "cross-site"}, 403, "cross-origin request refused"},
		{"same-site, other origin", good, []string{"Sec-Fetch-Site", "same-site"}, 403, "cross-origin request refused"},
		{"other origin", good, []string{"Origin", "http://evil.example"}, 403, "cross-origin request refused"},
		{"unknown policy", with("policy", "nope"), nil, 400, "unknown policy"},
		{"no policy", with("policy", ""), nil, 400, "unknown policy"},
		{"empty value", with("q", ""), nil, 400, "empty key"},
		{"refused identifier", with("q", " "), nil, 400, "invalid account name"},
		{"bad as", with("as", "pseudonym"), nil, 400, "&#34;as&#34; must be id or key"},
		{"value too long", with("q", strings.Repeat("a", 1025)), nil, 400, "value longer than 1024 bytes"},
		{"form too large", with("pad", strings.Repeat("a", 5000)), nil, 413, "form larger than 4096 bytes"},
		{"repeated field", func() url.Values { u := with("", ""); u["policy"] = []string{"login-ip", "login-account"}; return u }(), nil, 400, "repeated field policy"},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			a := f.do(t, "POST", "/admin/ops/reset", tc.form, tc.header...)
			if a.status != tc.status || !strings.Contains(a.body, `<p class="error" id="error" role="alert">`+tc.reason) {
				t.Errorf("POST reset (%s) = %d\n%s\nwant %d %q", tc.name, a.status, a.body, tc.status, tc.reason)
			}
			if d, _ := f.account.Peek(ctx, f.aliceKey); d.Allowed || !d.Locked {
				t.Fatalf("POST reset (%s) unlocked alice", tc.name)
			}
		})
	}
	for _, tc := range []struct{ method, target, allow string }{
		{"GET", "/admin/ops/reset?csrf=" + tok + "&policy=login-account&q=alice@example.com", "POST"},
		{"POST", "/admin/ops/", "GET, HEAD"},
		{"DELETE", "/admin/ops/", "GET, HEAD"},
	} {
		if a := f.do(t, tc.method, tc.target, nil); a.status != 405 || a.header.Get("Allow") != tc.allow {
			t.Errorf("%s %s = %d, Allow %q; want 405, %q", tc.method, tc.target, a.status, a.header.Get("Allow"), tc.allow)
		}
	}
	if a := f.do(t, "GET", "/admin/ops/nope", nil); a.status != 404 {
		t.Errorf("GET /admin/ops/nope = %d; want 404", a.status)
	}
	if ev, _ := f.obs.take(); len(ev) != 0 {
		t.Fatalf("refused resets reported %+v", ev)
	}

	// The page's own form, from the page's origin, as a browser sends it.
	a := f.do(t, "POST", "/admin/ops/reset", good, "Origin", f.srv.URL, "Sec-Fetch-Site", "same-origin")
	back, _ := url.Parse(a.header.Get("Location"))
	if q := back.Query(); a.status != http.StatusSeeOther || back.Path != "./" || q.Get("q") != "alice@example.com" ||
		q.Get("reset") != "login-account" || q.Get("done") == "" || len(q) != 3 {
		t.Fatalf("POST reset = %d, Location %q; want 303 to ./?q=alice@example.com&reset=login-account&done=…\n%s",
			a.status, a.header.Get("Location"), a.body)
	}
	if d, err := f.account.Allow(ctx, f.aliceKey); err != nil || !d.Allowed {
		t.Errorf("after the reset, the app's Allow = %+v, %v; want admitted", d, err)
	}
	ev, ops := f.obs.take()
	if len(ev) != 1 || ev[0].Kind != opshttp.EventReset || ev[0].Policy != "login-account" || ev[0].Key != f.aliceKey || ev[0].Err != nil || ops[0] != "carol" {
		t.Errorf("observers saw %+v by %q; want one EventReset of login-account %q by carol", ev, ops, f.aliceKey)
	}
	next, err := url.Parse(f.srv.URL + "/admin/ops/reset")
	if err != nil {
		t.Fatal(err)
	}
	loc, _ := next.Parse(a.header.Get("Location"))
	after := f.do(t, "GET", loc.RequestURI(), nil)
	if loc.Path != "/admin/ops/" || !strings.Contains(after.body, `<p class="flash" id="flash" role="status">Reset under <b>login-account</b>`) ||
		!strings.Contains(section(t, after.body, "login-account"), `<p class="status ok">`) {
		t.Errorf("page after the reset (%s):\n%s", loc, after.body)
	}

	// "Reset under" is said only to the browser that made the reset: not
	// for a link with reset= alone, nor with the proof of another
	// browser's form token, nor for another lookup.
	forged := loc.Query()
	forged.Del("done")
	otherLookup := loc.Query()
	otherLookup.Set("q", "bob@example.com")
	for name, a := range map[string]answer{
		"without the proof":          f.do(t, "GET", "/admin/ops/?"+forged.Encode(), nil),
		"another browser's":          f.do(t, "GET", loc.RequestURI(), nil, "Cookie", "ratekit_ops_csrf=ABCDEFGHIJKLMNOPQRSTUVWXYZ"),
		"the proof of another query": f.do(t, "GET", "/admin/ops/?"+otherLookup.Encode(), nil),
	} {
		if a.status != 200 || strings.Contains(a.body, `id="flash"`) {
			t.Errorf("GET ?reset=login-account %s = %d, with a flash %v; want 200 and none", name, a.status, strings.Contains(a.body, `id="flash"`))
		}
	}

	// A store failure resets nothing, says so, and is reported.
	broken := with("policy", "broken")
	if a := f.do(t, "POST", "/admin/ops/reset", broken); a.status != 503 || !strings.Contains(a.body, "reset failed") || strings.Contains(a.body, "hunter2") {
		t.Errorf("reset on a failing store = %d\n%s", a.status, a.body)
	}
	if ev, _ := f.obs.take(); len(ev) != 1 || ev[0].Kind != opshttp.EventReset || ev[0].Policy != "broken" || !errors.Is(ev[0].Err, errSecret) {
		t.Errorf("observers saw %+v; want the failed reset with its error", ev)
	}
}

// TestPageEscapes: keys are attacker-controlled; whatever they hold, the
// page shows them as text, in the lookup, the forms and the top list, and
// its Content-Security-Policy runs no script even if one slipped through.
func TestPageEscapes(t *testing.T) {
	const evil = `"><script>alert(1)</script><img src=x onerror=alert(1)>'&`
	top := func(context.Context, string, int) ([]opshttp.RefusedKey, error) {
		return []opshttp.RefusedKey{{Key: evil, Refusals: 7}, {Key: "javascript:alert(1)", Refusals: 1}}, nil
	}
	f := newPageFixture(t, opshttp.WithTopRefused(top))
	lockOut(t, f.ip, evil)
	a := f.do(t, "GET", "/admin/ops/?as=key&q="+url.QueryEscape(evil)+"&reset="+url.QueryEscape(evil), nil)
	if a.status != 200 {
		t.Fatalf("lookup = %d\n%s", a.status, a.body)
	}
	for _, bad := range []string{"<script", "<img", `value=""`} {
		if strings.Contains(a.body, bad) {
			t.Errorf("the page holds %q:\n%s", bad, a.body)
		}
	}
	escaped := html.EscapeString(evil)
	ip := section(t, a.body, "login-ip")
	for _, want := range []string{
		"Key <code>" + escaped + "</code>",
		`<input type="hidden" name="q" value="` + escaped + `">`,
		`<a href="?q=%22%3e%3cscript%3ealert%281%29%3c%2fscript%3e%3cimg%20src%3dx%20onerror%3dalert%281%29%3e%27%26&amp;as=key">`,
		`<a href="?q=javascript%3aalert%281%29&amp;as=key">`,
		`<p class="status denied">Refused`,
	} {
		if !strings.Contains(ip, want) {
			t.Errorf("login-ip section lacks %q:\n%s", want, ip)
		}
	}
	if strings.Contains(a.body, `id="flash"`) {
		t.Error("a reset flash for an unknown policy")
	}
	csp := a.header.Get("Content-Security-Policy")
	if !strings.HasPrefix(csp, "default-src 'none'; style-src 'sha256-") || strings.Contains(csp, "script") || strings.Contains(csp, "unsafe") {
		t.Errorf("Content-Security-Policy %q; want no script and no inline style but the page's", csp)
	}
	for h, want := range map[string]string{"X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff", "Cache-Control": "no-store", "Referrer-Policy": "no-referrer"} {
		if got := a.header.Get(h); got != want {
			t.Errorf("%s: %q, want %q", h, got, want)
		}
	}

	// The form's value goes back as it was: the reset resets the evil key.
	form := url.Values{"csrf": {token(t, a.body)}, "policy": {"login-ip"}, "q": {evil}, "as": {"key"}}
	if a := f.do(t, "POST", "/admin/ops/reset", form); a.status != http.StatusSeeOther {
		t.Fatalf("reset of the evil key = %d\n%s", a.status, a.body)
	}
	if d, _ := f.ip.Peek(context.Background(), evil); !d.Allowed {
		t.Error("the evil key is still refused after its reset")
	}
}

// TestPageStyleHash: the Content-Security-Policy's style hash is the hash
// of the page's <style> element, so the browser applies it.
func TestPageStyleHash(t *testing.T) {
	f := newPageFixture(t)
	a := f.do(t, "GET", "/admin/ops/", nil)
	_, rest, _ := strings.Cut(a.body, "<style>")
	css, _, ok := strings.Cut(rest, "</style>")
	if !ok || css == "" {
		t.Fatalf("no <style> in the page:\n%s", a.body)
	}
	sum := sha256.Sum256([]byte(css))
	if want := "style-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"; !strings.Contains(a.header.Get("Content-Security-Policy"), want) {
		t.Errorf("Content-Security-Policy %q lacks %q", a.header.Get("Content-Security-Policy"), want)
	}
	if strings.Contains(a.body, "<script") || strings.Contains(a.body, " style=") {
		t.Error("the page has a script or an inline style attribute")
	}
}

// TestPageTopRefused: the top refused keys of each policy come from its
// limiter (core.Limiter.TopRefused) or from the app's source, at most 10,
// each linked to its lookup; when the source fails, the page says they
// are not available.
func TestPageTopRefused(t *testing.T) {
	refuse := func(t *testing.T, l *core.Limiter, key string, times int) {
		t.Helper()
		for range times {
			if _, err := l.Allow(context.Background(), key); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Run("the limiters' own", func(t *testing.T) {
		f := newPageFixture(t)
		refuse(t, f.ip, "192.0.2.7", 5) // 2 admitted, 3 refused
		refuse(t, f.ip, "192.0.2.8", 3)
		refuse(t, f.account, f.aliceKey, 4) // locked out after 2
		a := f.do(t, "GET", "/admin/ops/", nil)
		for policy, want := range map[string]string{
			"login-ip": "<h3>Top refused keys</h3>\n<ol class=\"top\">" +
				"\n<li><a href=\"?q=192.0.2.7&amp;as=key\"><code>192.0.2.7</code></a> 3 refused</li>" +
				"\n<li><a href=\"?q=192.0.2.8&amp;as=key\"><code>192.0.2.8</code></a> 1 refused</li>\n</ol>",
			// A pseudonym stays one, looked up as stored.
			"login-account": "<h3>Top refused keys</h3>\n<ol class=\"top\">" +
				"\n<li><a href=\"?q=" + strings.ReplaceAll(f.aliceKey, ":", "%3a") + "&amp;as=key\"><code>" + f.aliceKey + "</code></a> 2 refused</li>\n</ol>",
			"api": "<h3>Top refused keys</h3>\n<p class=\"none\">None lately.</p>",
			// Its store keeps no refusals (and is down): the limiter's own.
			"broken": "<h3>Top refused keys</h3>\n<p class=\"none\">None lately.</p>",
		} {
			if s := section(t, a.body, policy); !strings.Contains(s, want) {
				t.Errorf("%s section:\n%s\nwant\n%s", policy, s, want)
			}
		}
	})

	t.Run("the hash of a long key", func(t *testing.T) {
		// Stored as its hash, which no lookup finds (a lookup hashes a
		// key of a hash's shape again): shown without a link.
		f := newPageFixture(t)
		long := "192.0.2.10/" + strings.Repeat("x", 200)
		refuse(t, f.ip, long, 3)
		a := f.do(t, "GET", "/admin/ops/", nil)
		want := "\n<li><code title=\"the hash of a key over 128 bytes: look it up by the key itself\">" + driver.BoundKey(long) + "</code> 1 refused</li>"
		if s := section(t, a.body, "login-ip"); !strings.Contains(s, want) {
			t.Errorf("login-ip section:\n%s\nwant\n%s", s, want)
		}
	})

	t.Run("a keyer that keeps the key", func(t *testing.T) {
		// An app whose IP keyer derives an address from itself: its keys
		// are shown, and looked up, as support knows them.
		f := newPageFixture(t, opshttp.WithKeyer("login-ip", func(id string) (string, error) { return strings.TrimSpace(id), nil }))
		refuse(t, f.ip, "192.0.2.9", 4)
		a := f.do(t, "GET", "/admin/ops/", nil)
		want := "\n<li><a href=\"?q=192.0.2.9\"><code>192.0.2.9</code></a> 2 refused</li>"
		if s := section(t, a.body, "login-ip"); !strings.Contains(s, want) {
			t.Errorf("login-ip section:\n%s\nwant\n%s", s, want)
		}
	})

	t.Run("fake source", func(t *testing.T) {
		var mu sync.Mutex
		asked := map[string]int{}
		top := func(_ context.Context, policy string, n int) ([]opshttp.RefusedKey, error) {
			mu.Lock()
			asked[policy] = n
			mu.Unlock()
			switch policy {
			case "login-ip":
				var out []opshttp.RefusedKey
				for i := range 12 { // more than asked for
					out = append(out, opshttp.RefusedKey{Key: fmt.Sprintf("192.0.2.%d", i+1), Refusals: int64(100 - i)})
				}
				return out, nil
			case "broken":
				return nil, errSecret
			}
			return nil, nil
		}
		f := newPageFixture(t, opshttp.WithTopRefused(top))
		a := f.do(t, "GET", "/admin/ops/", nil)
		ip := section(t, a.body, "login-ip")
		var want strings.Builder
		want.WriteString("<h3>Top refused keys</h3>\n<ol class=\"top\">")
		for i := range 10 {
			fmt.Fprintf(&want, "\n<li><a href=\"?q=192.0.2.%d&amp;as=key\"><code>192.0.2.%d</code></a> %d refused</li>", i+1, i+1, 100-i)
		}
		want.WriteString("\n</ol>")
		if !strings.Contains(ip, want.String()) {
			t.Errorf("login-ip top:\n%s\nwant\n%s", ip, want.String())
		}
		if s := section(t, a.body, "api"); !strings.Contains(s, "<p class=\"none\">None lately.</p>") {
			t.Errorf("api top of an empty list:\n%s", s)
		}
		if s := section(t, a.body, "broken"); !strings.Contains(s, "Not available: the source failed.") || strings.Contains(s, "hunter2") {
			t.Errorf("broken top of a failing source:\n%s", s)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(asked) != 4 || asked["login-ip"] != 10 {
			t.Errorf("the source was asked %v; want every policy, 10 each", asked)
		}
	})
}

// TestPageBounds: a malformed or oversized request is a 4xx with its
// reason, and looks nothing up.
func TestPageBounds(t *testing.T) {
	f := newPageFixture(t)
	for _, tc := range []struct {
		name, query, reason string
	}{
		{"value too long", "q=" + strings.Repeat("a", 1025), "value longer than 1024 bytes"},
		{"query too long", "q=a&pad=" + strings.Repeat("a", 4096), "query longer than 4096 bytes"},
		{"bad as", "q=a&as=x", "&#34;as&#34; must be id or key"},
		{"malformed query", "q=%zz", "malformed query"},
		{"repeated value", "q=a&q=b", "repeated field q"},
	} {
		a := f.do(t, "GET", "/admin/ops/?"+tc.query, nil)
		if a.status != 400 || !strings.Contains(a.body, `<p class="error" id="error" role="alert">`+tc.reason+"</p>") || strings.Contains(a.body, `class="key"`) {
			t.Errorf("%s: GET ?%.40s = %d\n%s\nwant 400 %q", tc.name, tc.query, a.status, a.body, tc.reason)
		}
	}
	if a := f.do(t, "GET", "/admin/ops/?q="+strings.Repeat("a", 1024), nil); a.status != 200 {
		t.Errorf("a value of 1024 bytes = %d; want 200", a.status)
	}
}
