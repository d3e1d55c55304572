package main

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"golang.org/x/crypto/bcrypt"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/keyfunc/personal"
	"github.com/ratekit/ratekit/redisstore"
)

func init() { gin.SetMode(gin.ReleaseMode) }

// plainUsers is a fast authenticator for tests that log in thousands of
// times: bcrypt costs about 14 ms per check under -race even at MinCost.
// Names are the normalised account names.
type plainUsers map[string]string

func (p plainUsers) authenticate(username, password string) bool {
	want, ok := p[normalize(username)]
	return subtle.ConstantTimeCompare([]byte(want), []byte(password)) == 1 && ok
}

// stores are the stores every scenario runs on. The Redis case starts a
// redis-server of its own (skipped with -short).
var stores = []struct {
	name string
	new  func(t *testing.T) core.Store
}{
	{"memory", func(*testing.T) core.Store { return core.NewMemoryStore() }},
	{"redis", func(t *testing.T) core.Store { return redisstore.New(redistest.Start(t).Client(t)) }},
}

// testConfig is the example's configuration with a store timeout generous
// enough that a loaded machine under -race never makes a decision fall
// back to the in-process store, which would split the counts.
func testConfig() config {
	cfg := defaultConfig()
	cfg.limiterOptions = []core.Option{core.WithTimeout(2 * time.Second)}
	return cfg
}

func newTestApp(t *testing.T, store core.Store, users authenticator, cfg config) *app {
	t.Helper()
	a, err := newApp(store, users, cfg)
	if err != nil {
		t.Fatalf("newApp: %v", err)
	}
	return a
}

// answer is what a login request got.
type answer struct {
	status     int
	retryAfter int    // Retry-After in seconds; 0 when absent
	policy     string // the limit a 429 names in its problem body
	challenged bool   // the 429 asks for a CAPTCHA
}

// jsonBody is a login that answers the CAPTCHA, as a client does once it
// has been asked: the tests of the limits see every attempt counted, as
// they would without the challenge (TestChallengeBeforeLockout sends
// logins without an answer).
func jsonBody(user, password string) string {
	return loginBody(user, password, "human")
}

// loginBody is a JSON login with the CAPTCHA answer captcha ("" for
// none).
func loginBody(user, password, captcha string) string {
	b, _ := json.Marshal(credentials{Username: user, Password: password, Captcha: captcha})
	return string(b)
}

func read(t *testing.T, status int, h http.Header, body io.Reader) answer {
	t.Helper()
	a := answer{status: status}
	if s := h.Get("Retry-After"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("Retry-After %q is not delta-seconds", s)
		}
		a.retryAfter = n
	}
	if status == http.StatusTooManyRequests {
		var p struct {
			Type       string   `json:"type"`
			Violated   []string `json:"violated-policies"`
			Challenged []string `json:"challenged-policies"`
			Captcha    string   `json:"captcha"`
		}
		if err := json.NewDecoder(body).Decode(&p); err != nil {
			t.Fatalf("429 body is not JSON: %v", err)
		}
		switch {
		case p.Type == guard.ChallengeProblemType && len(p.Challenged) == 1 && p.Captcha != "" && a.retryAfter == 0:
			a.policy, a.challenged = p.Challenged[0], true
		case p.Type == guard.ProblemType && len(p.Violated) == 1:
			a.policy = p.Violated[0]
		default:
			t.Fatalf("429 body is neither a denial naming one policy nor a challenge with a question and no Retry-After: %+v", p)
		}
	}
	return a
}

// serve sends one JSON login from client address ip through the router,
// in process.
func serve(t *testing.T, a *app, ip, user, password string) answer {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(jsonBody(user, password)))
	req.Header.Set("Content-Type", "application/json")
	req.RemoteAddr = ip + ":40000"
	rec := httptest.NewRecorder()
	a.router.ServeHTTP(rec, req)
	return read(t, rec.Code, rec.Header(), rec.Body)
}

// post sends one JSON login over the loopback server, answering the
// CAPTCHA.
func post(t *testing.T, c *http.Client, url, user, password string) answer {
	t.Helper()
	return postBody(t, c, url, jsonBody(user, password))
}

// postBody sends one JSON login body over the loopback server.
func postBody(t *testing.T, c *http.Client, url, body string) answer {
	t.Helper()
	res, err := c.Post(url+"/login", "application/json", strings.NewReader(body))
	if err != nil {
		t.Errorf("POST /login: %v", err)
		return answer{}
	}
	defer res.Body.Close()
	return read(t, res.StatusCode, res.Header, res.Body)
}

// used returns the units recorded for key on l, without consuming any.
func used(t *testing.T, l *core.Limiter, key string) int64 {
	t.Helper()
	d, err := l.Peek(context.Background(), key)
	if err != nil || len(d.Rules()) != 1 {
		t.Fatalf("Peek(%q) = %+v, %v", key, d, err)
	}
	return d.Rules()[0].Used
}

// TestConcurrentGuesses: 50 concurrent wrong passwords for one account,
// over real HTTP, reach the password check exactly 5 times; the other 45
// are 429 with Retry-After. Then 1000 correct logins in the same window
// are never limited: successes do not consume the failure budget.
func TestConcurrentGuesses(t *testing.T) {
	for _, sc := range stores {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			users := plainUsers{"alice": "wonderland", "bob": "builder"}
			cfg := testConfig()
			// Every request here comes from one address, with up to 50 in
			// flight: more than its IP limit, which would lock it out
			// (TestIPLockoutBurst). This test is about the account limit.
			cfg.ipLockout = core.Lockout{}
			a := newTestApp(t, sc.new(t), users, cfg)
			srv := httptest.NewServer(a.router)
			t.Cleanup(srv.Close)
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 30 * time.Second}
			t.Cleanup(client.CloseIdleConnections)

			const guesses = 50
			var (
				wg      sync.WaitGroup
				mu      sync.Mutex
				answers []answer
			)
			for i := range guesses {
				wg.Go(func() {
					ans := post(t, client, srv.URL, "Alice", fmt.Sprintf("guess-%d", i))
					mu.Lock()
					answers = append(answers, ans)
					mu.Unlock()
				})
			}
			wg.Wait()

			counts := map[int]int{}
			for _, ans := range answers {
				counts[ans.status]++
				if ans.status == http.StatusTooManyRequests && (ans.retryAfter < 1 || ans.retryAfter > 900) {
					t.Errorf("429 %+v: Retry-After %d, want 1..900 s", ans, ans.retryAfter)
				}
			}
			if got := a.checks.Load(); got != 5 {
				t.Errorf("%d concurrent wrong passwords reached the password check %d times, want 5", guesses, got)
			}
			if counts[http.StatusUnauthorized] != 5 || counts[http.StatusTooManyRequests] != guesses-5 {
				t.Errorf("%d concurrent wrong passwords: statuses %v, want 5×401 and %d×429", guesses, counts, guesses-5)
			}
			t.Logf("%d concurrent guesses: %d reached the password check, statuses %v", guesses, a.checks.Load(), counts)

			ip := "127.0.0.1"
			alice := accountKey(t, "alice")
			if got := used(t, a.account, alice); got != 5 {
				t.Errorf("alice's account limit holds %d failures, want 5", got)
			}
			if got := used(t, a.ip, ip); got != 5 {
				t.Errorf("the client's IP limit holds %d failures, want 5 (denied guesses are given back)", got)
			}

			// The locked account refuses even the right password: the
			// trade-off TestLockoutTradeoff bounds.
			if ans := post(t, client, srv.URL, "alice", "wonderland"); ans.status != http.StatusTooManyRequests || ans.policy != "login-account" {
				t.Errorf("alice's right password during the lockout: %+v, want 429 by login-account", ans)
			}

			// Bob fails 4 times, then logs in correctly 1000 times from the
			// same address in the same window.
			for i := range 4 {
				if ans := post(t, client, srv.URL, "bob", "nope"); ans.status != http.StatusUnauthorized {
					t.Fatalf("bob's wrong password %d: %+v, want 401", i+1, ans)
				}
			}
			const logins = 1000
			limited := 0
			for range logins {
				if ans := post(t, client, srv.URL, "bob", "builder"); ans.status != http.StatusOK {
					limited++
				}
			}
			if limited > 0 {
				t.Errorf("%d of %d correct logins were refused, want none", limited, logins)
			}
			if got := used(t, a.account, accountKey(t, "bob")); got != 0 {
				t.Errorf("bob's account limit holds %d failures after his logins, want 0 (reset on success)", got)
			}
			if got := used(t, a.ip, ip); got != 9 {
				t.Errorf("the client's IP limit holds %d failures, want 9: successes are not counted", got)
			}
			// alice's right password above was refused before the check.
			if got, want := a.checks.Load(), int64(5+4+logins); got != want {
				t.Errorf("password checks = %d, want %d", got, want)
			}
		})
	}
}

// TestLockoutTradeoff: an attacker who fails on purpose locks an account
// for at most the window, and the 429 says when to retry; the per-IP limit
// stops one address from locking more than ipFailures/accountFailures
// accounts. The windows are shortened to 2 s.
func TestLockoutTradeoff(t *testing.T) {
	const window = 2 * time.Second
	for _, sc := range stores {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			users := plainUsers{}
			const accounts = 10
			for i := range accounts {
				users[fmt.Sprintf("victim%d", i)] = fmt.Sprintf("pw-%d", i)
			}
			cfg := testConfig()
			cfg.window = window
			a := newTestApp(t, sc.new(t), users, cfg)
			const attacker, victimIP = "203.0.113.66", "198.51.100.7"

			// The attacker tries 5 wrong passwords on each of 10 accounts.
			lockable := int(cfg.ipFailures / cfg.accountFailures) // 4
			for i := range accounts {
				user := fmt.Sprintf("victim%d", i)
				for j := range cfg.accountFailures {
					ans := serve(t, a, attacker, user, "wrong")
					switch {
					case i < lockable && ans.status != http.StatusUnauthorized:
						t.Fatalf("attacker on %s, try %d: %+v, want 401", user, j+1, ans)
					case i >= lockable && (ans.status != http.StatusTooManyRequests || ans.policy != "login-ip"):
						t.Fatalf("attacker on %s, try %d: %+v, want 429 by login-ip", user, j+1, ans)
					}
				}
			}
			if got, want := a.checks.Load(), cfg.ipFailures; got != want {
				t.Errorf("the attacker's guesses reached the password check %d times, want %d", got, want)
			}

			// Accounts beyond the attacker's IP budget were never touched.
			for i := lockable; i < accounts; i++ {
				user := fmt.Sprintf("victim%d", i)
				if got := used(t, a.account, accountKey(t, user)); got != 0 {
					t.Errorf("%s holds %d failures from refused attempts, want 0", user, got)
				}
				if ans := serve(t, a, victimIP, user, fmt.Sprintf("pw-%d", i)); ans.status != http.StatusOK {
					t.Errorf("%s logging in from elsewhere: %+v, want 200", user, ans)
				}
			}

			// The accounts the attacker locked stay locked, even for the
			// right password from another address, until the window passes;
			// the 429 says when.
			retryAt := make([]time.Time, lockable)
			for i := range lockable {
				user := fmt.Sprintf("victim%d", i)
				now := time.Now()
				ans := serve(t, a, victimIP, user, fmt.Sprintf("pw-%d", i))
				if ans.status != http.StatusTooManyRequests || ans.policy != "login-account" {
					t.Fatalf("%s during the lockout: %+v, want 429 by login-account", user, ans)
				}
				if most := int(guard.Seconds(window)); ans.retryAfter < 1 || ans.retryAfter > most {
					t.Errorf("%s during the lockout: Retry-After %d, want 1..%d s (at most the window)", user, ans.retryAfter, most)
				}
				retryAt[i] = now.Add(time.Duration(ans.retryAfter) * time.Second)
			}
			// The attacker's address is refused for any account.
			if ans := serve(t, a, attacker, "victim9", "pw-9"); ans.status != http.StatusTooManyRequests || ans.policy != "login-ip" {
				t.Errorf("attacker's address with a right password: %+v, want 429 by login-ip", ans)
			}

			// At the time Retry-After named, the owners log in again.
			for i := range lockable {
				time.Sleep(time.Until(retryAt[i]))
				user := fmt.Sprintf("victim%d", i)
				if ans := serve(t, a, victimIP, user, fmt.Sprintf("pw-%d", i)); ans.status != http.StatusOK {
					t.Errorf("%s after Retry-After: %+v, want 200", user, ans)
				}
			}
		})
	}
}

// TestRequests: bodies as JSON or form; malformed requests are 400 and not
// counted as failures.
func TestRequests(t *testing.T) {
	t.Parallel()
	a := newTestApp(t, core.NewMemoryStore(), plainUsers{"alice": "wonderland"}, testConfig())
	tests := []struct {
		name, contentType, body string
		want                    int
		counted                 int64 // failures the IP limit holds afterwards
	}{
		{"json", "application/json", `{"username":" ALICE ","password":"wonderland"}`, 200, 0},
		{"form", "application/x-www-form-urlencoded", "username=alice&password=wonderland", 200, 0},
		{"wrong password", "application/x-www-form-urlencoded", "username=alice&password=nope", 401, 1},
		{"unknown user", "application/json", `{"username":"mallory","password":"x"}`, 401, 2},
		{"no password", "application/json", `{"username":"alice"}`, 400, 2},
		{"no username", "application/json", `{"password":"x"}`, 400, 2},
		{"username too long", "application/json", `{"username":"` + strings.Repeat("a", 400) + `","password":"x"}`, 400, 2},
		{"not json", "application/json", `{"username":`, 400, 2},
	}
	for _, tc := range tests {
		req := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(tc.body))
		req.Header.Set("Content-Type", tc.contentType)
		req.RemoteAddr = "192.0.2.1:1234"
		rec := httptest.NewRecorder()
		a.router.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("%s: status %d (%q), want %d", tc.name, rec.Code, rec.Body, tc.want)
		}
		if got := used(t, a.ip, "192.0.2.1"); got != tc.counted {
			t.Errorf("%s: IP limit holds %d failures, want %d", tc.name, got, tc.counted)
		}
	}
}

// TestUserStore: the demo's bcrypt user table.
func TestUserStore(t *testing.T) {
	t.Parallel()
	u, err := newUserStore(bcrypt.MinCost, demoUsers)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		user, password string
		want           bool
	}{
		{"alice", "wonderland", true},
		{"  Alice ", "wonderland", true},
		{"alice", "Wonderland", false},
		{"bob", "builder", true},
		{"bob", "wonderland", false},
		{"mallory", "wonderland", false},
		{"", "", false},
	}
	for _, tc := range tests {
		if got := u.authenticate(tc.user, tc.password); got != tc.want {
			t.Errorf("authenticate(%q, %q) = %v, want %v", tc.user, tc.password, got, tc.want)
		}
	}
}

// accountKey is the key the account limiter counts name under (default
// secret).
func accountKey(t *testing.T, name string) string {
	t.Helper()
	k, err := personal.AccountKey(name)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestSupportUnlocksEveryInstance: alice is locked out through two
// instances of the example sharing one Redis, each answering her from its
// deny cache. Support unlocks her with the ratekit command (run in
// process, with the app's secret and -account): both instances admit her
// right password at once, not after the 15-minute denial they cached.
func TestSupportUnlocksEveryInstance(t *testing.T) {
	const secret = "login-test-secret"
	srv := redistest.Start(t)
	type instance struct {
		name   string
		url    string
		cached atomic.Int64 // denials answered from the deny cache
	}
	newInstance := func(name string) *instance {
		in := &instance{name: name}
		cfg := testConfig()
		cfg.accountSecret = []byte(secret)
		cfg.limiterOptions = append(cfg.limiterOptions, core.WithObserver(core.ObserverFunc(func(_ context.Context, e core.Event) {
			if e.Kind == core.EventDecision && e.Policy == "login-account" && e.Decision.Source == core.SourceCache {
				in.cached.Add(1)
			}
		})))
		a := newTestApp(t, redisstore.New(srv.Client(t)), plainUsers{"alice": "wonderland"}, cfg)
		hs := httptest.NewServer(a.router)
		t.Cleanup(hs.Close)
		in.url = hs.URL
		return in
	}
	a, b := newInstance("A"), newInstance("B")
	client := &http.Client{Timeout: 10 * time.Second}
	t.Cleanup(client.CloseIdleConnections)

	for i := range 5 {
		if ans := post(t, client, a.url, "alice", "guess"); ans.status != http.StatusUnauthorized {
			t.Fatalf("wrong password %d on A: %+v, want 401", i+1, ans)
		}
	}
	// Both instances refuse her right password, until each answers from
	// its deny cache.
	for _, in := range []*instance{a, b} {
		deadline := time.Now().Add(5 * time.Second)
		for in.cached.Load() == 0 {
			ans := post(t, client, in.url, "alice", "wonderland")
			if ans.status != http.StatusTooManyRequests || ans.policy != "login-account" || ans.retryAfter < 890 {
				t.Fatalf("alice's right password on %s while locked: %+v, want 429 by login-account for about 900 s", in.name, ans)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never answered alice from its deny cache", in.name)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	bin := filepath.Join(t.TempDir(), "ratekit")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/ratekit").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/ratekit: %v\n%s", err, out)
	}
	ratekit := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "REDIS_URL=redis://"+srv.Addr()+"/0", "RATEKIT_KEY_SECRET="+secret)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("ratekit %q: %v\n%s%s", args, err, stdout.String(), stderr.String())
		}
		return stdout.String()
	}
	if out := ratekit("peek", "-policy", "login-account", "-rules", "5/15m", "-account", "Alice"); !strings.Contains(out, "a request now: denied") ||
		!strings.Contains(out, "sliding log: 5 units") || !strings.Contains(out, "challenge passed: until") {
		t.Fatalf("ratekit peek -account Alice:\n%s\nwant 5 units, her passed CAPTCHA, denied", out)
	} else {
		t.Logf("ratekit peek -account Alice:\n%s", out)
	}
	if out := ratekit("reset", "-policy", "login-account", "-account", "alice"); !strings.Contains(out, "deleted 1 Redis key") {
		t.Fatalf("ratekit reset -account alice:\n%s\nwant 1 Redis key deleted", out)
	}

	unlocked := time.Now()
	for _, in := range []*instance{a, b} {
		for {
			ans := post(t, client, in.url, "alice", "wonderland")
			if ans.status == http.StatusOK {
				t.Logf("%s admits alice %v after the reset", in.name, time.Since(unlocked).Round(time.Millisecond))
				break
			}
			if ans.status != http.StatusTooManyRequests || time.Since(unlocked) > time.Second {
				t.Fatalf("alice's right password on %s %v after the reset: %+v, want 200 at once", in.name, time.Since(unlocked).Round(time.Millisecond), ans)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
}

// TestIPLockout: an address that fails 20 times in the window is locked
// out for an hour, even after the window has passed and even with a right
// password (which is then never checked); other addresses are not; when
// the lockout ends it may fail again, and is locked out twice as long.
// Support lifts a lockout with Reset. The clock is stepped.
func TestIPLockout(t *testing.T) {
	for _, sc := range stores {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			now := time.Date(2025, 6, 1, 9, 0, 0, 0, time.UTC)
			clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
			step := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
			cfg := testConfig()
			cfg.limiterOptions = append(cfg.limiterOptions, core.WithClock(clock))
			a := newTestApp(t, sc.new(t), plainUsers{"alice": "wonderland"}, cfg)
			const attacker, other = "203.0.113.66", "198.51.100.7"

			fail := func(round int) {
				t.Helper()
				for i := range cfg.ipFailures {
					// A different account each time: only the IP limit fills.
					if ans := serve(t, a, attacker, fmt.Sprintf("r%d-user%d", round, i), "guess"); ans.status != http.StatusUnauthorized {
						t.Fatalf("round %d, guess %d: %+v, want 401", round, i+1, ans)
					}
				}
			}
			fail(1)
			if ans := serve(t, a, attacker, "someone", "guess"); ans.status != http.StatusTooManyRequests || ans.policy != "login-ip" || ans.retryAfter != 3600 {
				t.Fatalf("guess 21: %+v, want 429 by login-ip, Retry-After 3600 (locked out for an hour)", ans)
			}
			step(cfg.window + time.Minute) // the window has passed, the lockout has not
			checks := a.checks.Load()
			if ans := serve(t, a, attacker, "alice", "wonderland"); ans.status != http.StatusTooManyRequests || ans.retryAfter != 3600-16*60 {
				t.Errorf("right password from the locked-out address: %+v, want 429, Retry-After %d", ans, 3600-16*60)
			}
			if got := a.checks.Load(); got != checks {
				t.Errorf("the locked-out address reached the password check %d times, want 0", got-checks)
			}
			if ans := serve(t, a, other, "alice", "wonderland"); ans.status != http.StatusOK {
				t.Errorf("alice from another address: %+v, want 200", ans)
			}
			if d, err := a.ip.Peek(context.Background(), attacker); err != nil || !d.Locked {
				t.Errorf("Peek(attacker) = %+v, %v; want locked out", d, err)
			}

			step(time.Hour - cfg.window - time.Minute) // the lockout ends
			fail(2)
			if ans := serve(t, a, attacker, "someone", "guess"); ans.status != http.StatusTooManyRequests || ans.retryAfter != 7200 {
				t.Fatalf("back for more: %+v, want 429, Retry-After 7200 (twice as long)", ans)
			}
			// Support unlocks the address.
			if err := a.ip.Reset(context.Background(), attacker); err != nil {
				t.Fatal(err)
			}
			if ans := serve(t, a, attacker, "alice", "wonderland"); ans.status != http.StatusOK {
				t.Errorf("after Reset: %+v, want 200", ans)
			}
		})
	}
}

// gate is an authenticator that holds every check until it is opened, so
// that a test knows how many logins are in flight.
type gate struct {
	plainUsers
	arrived chan struct{}
	open    chan struct{}
}

func (g *gate) authenticate(username, password string) bool {
	g.arrived <- struct{}{}
	<-g.open
	return g.plainUsers.authenticate(username, password)
}

// TestIPLockoutBurst: the IP limit reserves a unit for every login in
// flight, so one more concurrent login from an address than its limit is
// refused, and that refusal locks the address out, even though the logins
// in flight then succeed and give their units back. Size the IP limit
// above what one address sends at once.
func TestIPLockoutBurst(t *testing.T) {
	for _, sc := range stores {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig()
			users := plainUsers{}
			for i := range cfg.ipFailures {
				users[fmt.Sprintf("user%d", i)] = "pw"
			}
			g := &gate{plainUsers: users, arrived: make(chan struct{}, cfg.ipFailures), open: make(chan struct{})}
			a := newTestApp(t, sc.new(t), g, cfg)
			const office = "192.0.2.10"
			var wg sync.WaitGroup
			answers := make([]answer, cfg.ipFailures)
			for i := range cfg.ipFailures {
				wg.Go(func() { answers[i] = serve(t, a, office, fmt.Sprintf("user%d", i), "pw") })
			}
			var release sync.Once
			t.Cleanup(func() { release.Do(func() { close(g.open) }) })
			for i := range cfg.ipFailures {
				select {
				case <-g.arrived: // 20 logins in flight, each holding a unit
				case <-time.After(10 * time.Second):
					t.Fatalf("%d of %d logins reached the password check, want all", i, cfg.ipFailures)
				}
			}
			if ans := serve(t, a, office, "user0", "pw"); ans.status != http.StatusTooManyRequests || ans.policy != "login-ip" || ans.retryAfter != 3600 {
				t.Errorf("login 21 while 20 are in flight: %+v, want 429 by login-ip, locked out for an hour", ans)
			}
			release.Do(func() { close(g.open) })
			wg.Wait()
			for i, ans := range answers {
				if ans.status != http.StatusOK {
					t.Errorf("login %d in flight: %+v, want 200", i+1, ans)
				}
			}
			if got := used(t, a.ip, office); got != 0 {
				t.Errorf("the office's IP limit holds %d failures, want 0 (successes refunded)", got)
			}
			if d, err := a.ip.Peek(context.Background(), office); err != nil || !d.Locked {
				t.Errorf("Peek(office) = %+v, %v; want locked out all the same", d, err)
			}
		})
	}
}

// TestBlockedNetwork: a client on the deny list (-block) gets 403 before
// any limit or password check, with the right password too; others log in
// as before, and the blocked requests use up no one's budget.
func TestBlockedNetwork(t *testing.T) {
	cfg := testConfig()
	blocked, err := keyfunc.ParseTrustedProxies("203.0.113.0/24")
	if err != nil {
		t.Fatal(err)
	}
	cfg.block = keyfunc.InNetworks(blocked)
	a := newTestApp(t, core.NewMemoryStore(), plainUsers{"alice": "wonderland"}, cfg)
	for range 30 {
		if got := serve(t, a, "203.0.113.9", "alice", "wonderland"); got.status != http.StatusForbidden || got.retryAfter != 0 {
			t.Fatalf("login from a blocked network = %+v, want 403 without Retry-After", got)
		}
	}
	if n := a.checks.Load(); n != 0 {
		t.Errorf("%d password checks for blocked requests, want none", n)
	}
	if got := serve(t, a, "198.51.100.1", "alice", "wonderland"); got.status != http.StatusOK {
		t.Errorf("login from another network = %+v, want 200", got)
	}
	if got := used(t, a.ip, "203.0.113.9"); got != 0 {
		t.Errorf("units used by the blocked address = %d, want 0", got)
	}
}

// TestSupportUnlocksThroughAdminRoutes: with LOGIN_ADMIN_TOKEN the example
// mounts opshttp, as the unlock commands of docs/examples.md use it: a peek of
// alice's account (by her user name, keyed with the app's secret) says
// she is locked, a DELETE unlocks her, and her right password then logs
// her in. Without the token the routes refuse; without the setting they
// are not mounted.
func TestSupportUnlocksThroughAdminRoutes(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.adminToken = "s3cret"
	cfg.accountSecret = []byte("app secret")
	a := newTestApp(t, core.NewMemoryStore(), plainUsers{"alice": "wonderland"}, cfg)
	admin := func(method, path, token string) (int, string) {
		t.Helper()
		req := httptest.NewRequest(method, path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		a.router.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	const alice = "/admin/ratelimit/policies/login-account/keys/alice"

	for range 5 {
		serve(t, a, "192.0.2.1", "alice", "guess")
	}
	if ans := serve(t, a, "192.0.2.2", "alice", "wonderland"); ans.status != http.StatusTooManyRequests {
		t.Fatalf("alice after 5 failures: %+v, want 429", ans)
	}
	if code, _ := admin(http.MethodGet, alice, ""); code != http.StatusUnauthorized {
		t.Errorf("peek without the token: %d, want 401", code)
	}
	if code, body := admin(http.MethodGet, alice, "s3cret"); code != http.StatusOK || !strings.Contains(body, `"allowed":false`) {
		t.Errorf("peek of alice: %d %s, want 200 with \"allowed\":false", code, body)
	}
	if code, _ := admin(http.MethodDelete, alice, "s3cret"); code != http.StatusNoContent {
		t.Errorf("reset of alice: %d, want 204", code)
	}
	if ans := serve(t, a, "192.0.2.2", "alice", "wonderland"); ans.status != http.StatusOK {
		t.Errorf("alice after the reset: %+v, want 200", ans)
	}

	plain := newTestApp(t, core.NewMemoryStore(), plainUsers{"alice": "wonderland"}, testConfig())
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, alice, nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	plain.router.ServeHTTP(rec, req)
	if rec.Code != http.StatusNotFound {
		t.Errorf("admin route without LOGIN_ADMIN_TOKEN: %d, want 404 (not mounted)", rec.Code)
	}
}

// TestChallengeBeforeLockout: two instances of the example on one store
// (Redis: a client each on one server; memory: one MemoryStore). Alice
// fails twice; then 20 concurrent wrong passwords without an answer, over
// both instances, are all asked for the CAPTCHA and none reaches the
// password check; a wrong answer is 403, which the IP limit counts; 20
// concurrent wrong passwords with the answer reach the check exactly 3
// more times (5 in all) and the other 17 are denied by login-account,
// which then refuses her right password too. Bob, asked for the CAPTCHA
// after 2 failures, logs in with it: his failures and his pass are
// forgotten, so after 2 more failures he is asked again.
func TestChallengeBeforeLockout(t *testing.T) {
	for _, sc := range []struct {
		name   string
		stores func(t *testing.T) [2]core.Store
	}{
		{"memory", func(*testing.T) [2]core.Store {
			s := core.NewMemoryStore()
			return [2]core.Store{s, s}
		}},
		{"redis", func(t *testing.T) [2]core.Store {
			srv := redistest.Start(t)
			return [2]core.Store{redisstore.New(srv.Client(t)), redisstore.New(srv.Client(t))}
		}},
	} {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			users := plainUsers{"alice": "wonderland", "bob": "builder"}
			cfg := testConfig()
			cfg.ipFailures = 1000 // this test is about the account limit
			cfg.ipLockout = core.Lockout{}
			var (
				apps [2]*app
				urls [2]string
			)
			for i, st := range sc.stores(t) {
				apps[i] = newTestApp(t, st, users, cfg)
				srv := httptest.NewServer(apps[i].router)
				t.Cleanup(srv.Close)
				urls[i] = srv.URL
			}
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 30 * time.Second}
			t.Cleanup(client.CloseIdleConnections)
			checks := func() int64 { return apps[0].checks.Load() + apps[1].checks.Load() }
			// flood sends 20 logins with body at once, alternating
			// instances, and counts what they got.
			flood := func(body string) map[string]int {
				var (
					wg     sync.WaitGroup
					mu     sync.Mutex
					counts = map[string]int{}
				)
				for i := range 20 {
					wg.Go(func() {
						ans := postBody(t, client, urls[i%2], body)
						kind := strconv.Itoa(ans.status)
						switch {
						case ans.challenged && ans.policy == "login-account":
							kind = "challenge"
						case ans.status == http.StatusTooManyRequests && ans.policy == "login-account" && ans.retryAfter >= 1 && ans.retryAfter <= 900:
							kind = "deny"
						}
						mu.Lock()
						counts[kind]++
						mu.Unlock()
					})
				}
				wg.Wait()
				return counts
			}

			for i := range 2 {
				if ans := postBody(t, client, urls[i], loginBody("alice", "guess", "")); ans.status != http.StatusUnauthorized {
					t.Fatalf("alice's wrong password %d: %+v, want 401", i+1, ans)
				}
			}
			if got := flood(loginBody("alice", "guess", "")); got["challenge"] != 20 || checks() != 2 {
				t.Fatalf("20 wrong passwords without a CAPTCHA after 2 failures: %v, %d password checks; want 20 challenges, 2 checks", got, checks())
			}
			if ans := postBody(t, client, urls[1], loginBody("alice", "guess", "robot")); ans.status != http.StatusForbidden || checks() != 2 {
				t.Fatalf("a wrong CAPTCHA answer: %+v, %d checks; want 403 and no check", ans, checks())
			}
			if got := used(t, apps[0].ip, "127.0.0.1"); got != 3 {
				t.Errorf("the IP limit holds %d failures, want 3: 2 passwords and the wrong answer, no challenge", got)
			}
			alice := accountKey(t, "alice")
			if got := used(t, apps[1].account, alice); got != 2 {
				t.Errorf("alice's account limit holds %d failures after the challenges, want 2", got)
			}

			if got := flood(loginBody("alice", "guess", "human")); got["401"] != 3 || got["deny"] != 17 || checks() != 5 {
				t.Fatalf("20 wrong passwords with the CAPTCHA answered: %v, %d password checks; want 3×401, 17 denied by login-account, 5 checks", got, checks())
			}
			for i, a := range apps {
				if got := used(t, a.account, alice); got != 5 {
					t.Errorf("instance %d: alice's account limit holds %d failures, want 5", i, got)
				}
			}
			if ans := postBody(t, client, urls[0], loginBody("alice", "wonderland", "human")); ans.status != http.StatusTooManyRequests || ans.challenged || ans.policy != "login-account" {
				t.Errorf("alice's right password with the CAPTCHA after 5 failures: %+v, want 429 by login-account", ans)
			}

			for i := range 2 {
				if ans := postBody(t, client, urls[i], loginBody("bob", "nope", "")); ans.status != http.StatusUnauthorized {
					t.Fatalf("bob's wrong password %d: %+v, want 401", i+1, ans)
				}
			}
			if ans := postBody(t, client, urls[0], loginBody("bob", "builder", "")); !ans.challenged {
				t.Fatalf("bob's right password without the CAPTCHA after 2 failures: %+v, want a challenge", ans)
			}
			if ans := postBody(t, client, urls[1], loginBody("bob", "builder", "human")); ans.status != http.StatusOK {
				t.Fatalf("bob's right password with the CAPTCHA: %+v, want 200", ans)
			}
			for i := range 2 {
				if ans := postBody(t, client, urls[i], loginBody("bob", "nope", "")); ans.status != http.StatusUnauthorized {
					t.Fatalf("bob's wrong password %d after his login: %+v, want 401", i+1, ans)
				}
			}
			if ans := postBody(t, client, urls[0], loginBody("bob", "nope", "")); !ans.challenged {
				t.Errorf("bob's 3rd failure after his login: %+v, want a challenge: his pass went with his failures", ans)
			}
		})
	}
}
