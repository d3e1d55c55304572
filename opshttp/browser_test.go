package opshttp_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/keyfunc/personal"
	"github.com/ratekit/ratekit/nethttp"
	"github.com/ratekit/ratekit/opshttp"
	"github.com/ratekit/ratekit/redisstore"
)

// chromiumNotFound is the failure of the browser test on a machine
// without chromium.
const chromiumNotFound = "chromium not found: install it (apt-get install chromium) or run `make test`"

// browserTimeout bounds the whole browser part of a test.
const browserTimeout = 90 * time.Second

// lockedBuffer is a bytes.Buffer safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// browser starts a headless Debian chromium with a new empty profile,
// stopped when t ends, and returns a tab's context, bounded by
// browserTimeout. Without chromium it fails t; with -short it skips it.
func browser(t *testing.T) context.Context {
	t.Helper()
	if testing.Short() {
		t.Skip("starts chromium")
	}
	bin, err := exec.LookPath("chromium")
	if err != nil {
		if bin, err = exec.LookPath("chromium-browser"); err != nil {
			t.Fatal(chromiumNotFound)
		}
	}
	profile := t.TempDir()
	out := &lockedBuffer{}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(bin),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(profile),
		chromedp.CombinedOutput(out),
	)
	tab, cancelTab := chromedp.NewContext(alloc)
	// The first call starts the browser, under no timeout of its own
	// (see chromedp.Run); the tab's later calls are bounded.
	start := time.Now()
	if err := chromedp.Do(tab); err != nil {
		cancelTab()
		cancelAlloc()
		t.Fatalf("start %s: %v\n%s", bin, err, out)
	}
	t.Logf("chromium started in %v", time.Since(start).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(tab, browserTimeout)
	t.Cleanup(func() {
		cancel()
		cancelTab()
		cancelAlloc() // kills chromium and waits, before the profile is removed
		if t.Failed() {
			t.Logf("chromium's output:\n%s", out)
		}
	})
	return ctx
}

// TestPageInBrowser is support unlocking a user in a real browser: alice
// is locked out through instance 1 of an app whose two instances share a
// Redis, each with its own client; support looks her up on instance 1's
// page, sees the lockout and its end, lifts it, and instance 2, which
// had cached her denial, admits her at once. A key with markup, refused
// by the IP limit and so among its top refused keys, shows as text, and
// no script runs.
func TestPageInBrowser(t *testing.T) {
	ctx := browser(t)
	srv := redistest.Start(t)
	secret := personal.Secret([]byte("browser test secret"))
	const evil = `<img src=x onerror="document.title='pwned'"><script>document.title='pwned'</script>`
	accountPolicy := core.Policy{Name: "login-account", Rules: []core.Rule{{Limit: 3, Window: 15 * time.Minute}},
		Lockout: core.Lockout{For: time.Hour, Max: 24 * time.Hour}}
	ipPolicy := core.Policy{Name: "login-ip", Rules: []core.Rule{{Limit: 100, Window: time.Hour}}}

	type instance struct {
		name        string
		account, ip *core.Limiter
		url         string
		cached      atomic.Int64 // denials of login-account answered from the deny cache
		resets      *recorded
	}
	newInstance := func(name string) *instance {
		in := &instance{name: name, resets: &recorded{}}
		store := redisstore.New(srv.Client(t)) // a go-redis client of its own
		obs := core.WithObserver(core.ObserverFunc(func(_ context.Context, e core.Event) {
			if e.Kind == core.EventDecision && e.Decision.Source == core.SourceCache {
				in.cached.Add(1)
			}
		}))
		in.account = testkit.Limiter(t, store, accountPolicy, obs)
		in.ip = testkit.Limiter(t, store, ipPolicy)
		mux := http.NewServeMux()
		// The app's login: failures count, per account; alice's
		// password is "wonderland".
		limit := nethttp.New(in.account, guard.WithKey(personal.Account(secret)), guard.WithCountIf(func(status int) bool { return status >= 400 }))
		mux.Handle("POST /login", limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.PostFormValue("password") != "wonderland" {
				http.Error(w, "wrong password", http.StatusUnauthorized)
				return
			}
			_, _ = w.Write([]byte("welcome\n"))
		})))
		page, err := opshttp.NewPage([]*core.Limiter{in.account, in.ip},
			opshttp.WithAuthorization(testAuth),
			opshttp.WithKeyer("login-account", func(id string) (string, error) { return personal.AccountKey(id, secret) }),
			opshttp.WithObserver(in.resets))
		if err != nil {
			t.Fatal(err)
		}
		mux.Handle("/admin/ops/", http.StripPrefix("/admin/ops", page))
		hs := httptest.NewServer(mux) // on 127.0.0.1
		t.Cleanup(hs.Close)
		in.url = hs.URL
		return in
	}
	one, two := newInstance("instance 1"), newInstance("instance 2")
	// A client whose key holds markup floods the IP limit: its page lists
	// the key among the most refused.
	for range ipPolicy.Rules[0].Limit + 3 {
		if _, err := one.ip.Allow(context.Background(), evil); err != nil {
			t.Fatal(err)
		}
	}
	client := &http.Client{Timeout: 10 * time.Second}
	t.Cleanup(client.CloseIdleConnections)
	login := func(in *instance, password string) int {
		t.Helper()
		resp, err := client.PostForm(in.url+"/login", url.Values{"username": {"alice"}, "password": {password}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}

	// Alice is locked out through instance 1: three failures, and the
	// fourth attempt is refused.
	for i := range 3 {
		if got := login(one, "guess"); got != http.StatusUnauthorized {
			t.Fatalf("wrong password %d on instance 1: %d, want 401", i+1, got)
		}
	}
	lockedAt := time.Now()
	if got := login(one, "guess"); got != http.StatusTooManyRequests {
		t.Fatalf("fourth attempt on instance 1: %d, want 429", got)
	}
	// Instance 2 refuses her right password, until it answers from its
	// deny cache.
	for deadline := time.Now().Add(5 * time.Second); two.cached.Load() == 0; {
		if got := login(two, "wonderland"); got != http.StatusTooManyRequests {
			t.Fatalf("alice's right password on instance 2 while locked: %d, want 429", got)
		}
		if time.Now().After(deadline) {
			t.Fatal("instance 2 never answered alice from its deny cache")
		}
		time.Sleep(5 * time.Millisecond)
	}

	var dialogs atomic.Int64
	if err := chromedp.Listen(ctx, func(ev any) {
		if _, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			dialogs.Add(1)
		}
	}); err != nil {
		t.Fatal(err)
	}
	// Support is signed in: the app's check reads these headers.
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{
		Headers: network.Headers{"Authorization": "Bearer s3cret", "X-Operator": "erin"}}); err != nil {
		t.Fatal(err)
	}

	const (
		account = `section[data-policy="login-account"]`
		ip      = `section[data-policy="login-ip"]`
	)
	// Look alice up as support knows her.
	if err := chromedp.Do(ctx,
		chromedp.Navigate(one.url+"/admin/ops/"),
		chromedp.WaitVisible(chromedp.CSS(`#lookup input[name=q]`)),
		chromedp.SendKeys(chromedp.CSS(`#lookup input[name=q]`), " Alice "),
		chromedp.Click(chromedp.CSS(`#lookup button`)),
		chromedp.WaitVisible(chromedp.CSS(account+` p.status`)),
	); err != nil {
		t.Fatalf("look alice up: %v", err)
	}
	status := text(t, ctx, account+` p.status`)
	until, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(account+` p.status time`), "datetime"))
	if err != nil {
		t.Fatal(err)
	}
	end, err := time.Parse(time.RFC3339, until.Value)
	if !strings.HasPrefix(status, "Locked out until ") || err != nil || !near(end, lockedAt.Add(time.Hour)) {
		t.Fatalf("alice's status on the page: %q, ending %q (%v); want locked out for an hour from %v", status, until.Value, err, lockedAt.UTC())
	}
	if row := text(t, ctx, account+` tbody tr`); !strings.HasPrefix(row, "3 per 15m\t3\t0\t") {
		t.Errorf("alice's rule on the page: %q; want 3 of 3 used", row)
	}
	// The page's style sheet applies under its Content-Security-Policy.
	if border, err := chromedp.Run(ctx, chromedp.Evaluate[string](`getComputedStyle(document.querySelector('.policy')).borderTopStyle`)); err != nil || border != "solid" {
		t.Errorf("the page's style: border %q, %v; want its style sheet applied", border, err)
	}

	// Lift the lockout.
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(account+` form.reset button`)),
		chromedp.WaitVisible(chromedp.ID("flash")),
	); err != nil {
		t.Fatalf("lift alice's lockout: %v", err)
	}
	unlocked := time.Now()
	if status := text(t, ctx, account+` p.status`); !strings.HasPrefix(status, "Admitted") {
		t.Errorf("alice's status after the reset: %q; want admitted", status)
	}
	if ev, ops := one.resets.take(); len(ev) != 1 || ev[0].Kind != opshttp.EventReset || ev[0].Policy != "login-account" || ops[0] != "erin" {
		t.Errorf("instance 1's observers saw %+v by %q; want one reset of login-account by erin", ev, ops)
	}

	// Instance 2 admits her at once, not after the hour it cached.
	for {
		got := login(two, "wonderland")
		if got == http.StatusOK {
			t.Logf("instance 2 admits alice %v after the reset", time.Since(unlocked).Round(time.Millisecond))
			break
		}
		if got != http.StatusTooManyRequests || time.Since(unlocked) > time.Second {
			t.Fatalf("alice's right password on instance 2 %v after the reset: %d, want 200", time.Since(unlocked).Round(time.Millisecond), got)
		}
		time.Sleep(2 * time.Millisecond)
	}

	// Grant alice 2 more failed logins for a day, from the page of
	// instance 1: instance 2 takes 5 wrong passwords at once, then refuses.
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(account+` form.grant input[name=extra]`), "2"),
		chromedp.SendKeys(chromedp.CSS(account+` form.grant input[name=by]`), "erin"),
		chromedp.Click(chromedp.CSS(account+` form.grant button[value=grant]`)),
		chromedp.WaitVisible(chromedp.CSS(account+` p.grant`)),
	); err != nil {
		t.Fatalf("grant alice 2 more: %v", err)
	}
	if got := text(t, ctx, account+` p.grant`); !strings.HasPrefix(got, "Granted 2 more units on every rule until") || !strings.Contains(got, "by erin") {
		t.Errorf("alice's grant on the page: %q", got)
	}
	for i := range 5 {
		if got := login(two, "guess"); got != http.StatusUnauthorized {
			t.Fatalf("wrong password %d on instance 2 with 2 more granted: %d, want 401", i+1, got)
		}
	}
	if got := login(two, "guess"); got != http.StatusTooManyRequests {
		t.Fatalf("sixth wrong password on instance 2: %d, want 429", got)
	}

	// A key with markup, from the top refused list, shows as text.
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(ip+` ol.top a`)),
		chromedp.WaitVisible(chromedp.CSS(ip+` p.key code`)),
	); err != nil {
		t.Fatalf("follow the top refused key: %v", err)
	}
	if got := text(t, ctx, ip+` p.key code`); got != evil {
		t.Errorf("the key shown: %q; want %q as text", got, evil)
	}
	if got := text(t, ctx, ip+` ol.top code`); got != evil {
		t.Errorf("the top refused key shown: %q; want %q as text", got, evil)
	}
	planted, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('script, img').length`))
	if err != nil || planted != 0 {
		t.Errorf("the page holds %d script or img elements (%v); want none", planted, err)
	}
	if title, err := chromedp.Run(ctx, chromedp.Title()); err != nil || title != "ratekit operations" || dialogs.Load() != 0 {
		t.Errorf("title %q (%v), %d dialogs; want no script to have run", title, err, dialogs.Load())
	}
}

// text returns the text of the first element sel matches.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return strings.TrimSpace(s)
}
