package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/driver/drivertest"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/keyfunc/personal"
	"github.com/ratekit/ratekit/redisstore"
)

// One number, in the formats the README documents, and its E.164 form.
var formats = []string{"+86 138-0013-8000", "8613800138000", "13800138000"}

const e164 = "+8613800138000"

var testSecret = []byte("sms test secret")

// testConfig is the example's configuration with an app secret and a store
// timeout generous enough that a loaded machine under -race never makes a
// decision fall back to the in-process store.
func testConfig(opts ...core.Option) config {
	cfg := defaultConfig()
	cfg.secret = testSecret
	cfg.limiterOptions = append([]core.Option{core.WithTimeout(2 * time.Second)}, opts...)
	return cfg
}

// recorder is a sender that keeps what it sent, or fails when told to.
type recorder struct {
	mu   sync.Mutex
	sent []string
	fail bool
}

func (r *recorder) send(_ context.Context, number, code string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail {
		return errors.New("provider down")
	}
	if len(code) != 6 {
		return errors.New("bad code " + code)
	}
	r.sent = append(r.sent, number)
	return nil
}

func (r *recorder) setFail(fail bool) {
	r.mu.Lock()
	r.fail = fail
	r.mu.Unlock()
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.sent)
}

func newTestApp(t *testing.T, store core.Store, s sender, cfg config) *app {
	t.Helper()
	a, err := newApp(store, s, cfg)
	if err != nil {
		t.Fatalf("newApp: %v", err)
	}
	return a
}

// answer is what a send request got.
type answer struct {
	status     int
	retryAfter string
	policy     string // the rule a 429 names in violated-policies
	body       string
}

// send posts one request for phone from client address ip, in process.
// The formats alternate between JSON and form bodies.
func send(t *testing.T, a *app, ip, phone string) answer {
	t.Helper()
	var req *http.Request
	if strings.HasPrefix(phone, "+") {
		b, _ := json.Marshal(map[string]string{"phone": phone})
		req = httptest.NewRequest(http.MethodPost, "/sms/send", strings.NewReader(string(b)))
		req.Header.Set("Content-Type", "application/json")
	} else {
		req = httptest.NewRequest(http.MethodPost, "/sms/send", strings.NewReader(url.Values{"phone": {phone}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	req.RemoteAddr = ip + ":50000"
	rec := httptest.NewRecorder()
	a.echo.ServeHTTP(rec, req)
	ans := answer{status: rec.Code, retryAfter: rec.Header().Get("Retry-After"), body: rec.Body.String()}
	if rec.Code == http.StatusTooManyRequests {
		var p struct {
			Violated []string `json:"violated-policies"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || len(p.Violated) != 1 {
			t.Fatalf("429 body %q is not a problem naming one rule: %v", rec.Body, err)
		}
		ans.policy = p.Violated[0]
	}
	return ans
}

func wantAnswer(t *testing.T, what string, got answer, status int, policy string) {
	t.Helper()
	if got.status != status || got.policy != policy {
		t.Fatalf("%s: %+v, want status %d naming %q", what, got, status, policy)
	}
}

// used returns the units each rule of l holds for key, without consuming
// any.
func used(t *testing.T, l *core.Limiter, key string) []int64 {
	t.Helper()
	d, err := l.Peek(context.Background(), key)
	if err != nil {
		t.Fatalf("Peek(%q): %v", key, err)
	}
	u := make([]int64, len(d.Rules()))
	for i, r := range d.Rules() {
		u[i] = r.Used
	}
	return u
}

func wantUsed(t *testing.T, what string, l *core.Limiter, key string, want ...int64) {
	t.Helper()
	if got := used(t, l, key); !equal(got, want) {
		t.Errorf("%s: %s holds %v units, want %v", what, l.Policy().Name, got, want)
	}
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// phoneKey is the key the phone limiter counts number under.
func phoneKey(number string) string { return personal.Pseudonym(testSecret, number) }

// stores are the stores every scenario runs on; the Redis case starts a
// redis-server of its own (skipped with -short).
var stores = []struct {
	name string
	new  func(t *testing.T) core.Store
}{
	{"memory", func(*testing.T) core.Store { return core.NewMemoryStore() }},
	{"redis", func(t *testing.T) core.Store { return redisstore.New(redistest.Start(t).Client(t)) }},
}

// TestFormatsShareOneKey: three ways of writing one number are one key,
// so the 2nd and 3rd sends are denied by the 1/60 s rule.
func TestFormatsShareOneKey(t *testing.T) {
	for _, sc := range stores {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			s := &recorder{}
			a := newTestApp(t, sc.new(t), s, testConfig())
			wantAnswer(t, formats[0], send(t, a, "192.0.2.1", formats[0]), http.StatusAccepted, "")
			for _, f := range formats[1:] {
				ans := send(t, a, "192.0.2.1", f)
				wantAnswer(t, f, ans, http.StatusTooManyRequests, "sms-phone-60s")
				if n, err := strconv.Atoi(ans.retryAfter); err != nil || n < 59 || n > 60 {
					t.Errorf("%s: Retry-After %q, want about 60 s", f, ans.retryAfter)
				}
			}
			if s.count() != 1 || s.sent[0] != e164 {
				t.Errorf("sent %v, want one code to %s", s.sent, e164)
			}
			wantUsed(t, "after three formats", a.phone, phoneKey(e164), 1, 1, 1)

			// Malformed numbers are 400, with no detail, and cost nothing.
			for _, bad := range []string{"12345", "not a number", "+86 138-0013-800x"} {
				ans := send(t, a, "192.0.2.1", bad)
				if ans.status != http.StatusBadRequest || strings.Contains(ans.body, "138") {
					t.Errorf("number %q: %+v, want 400 without detail", bad, ans)
				}
			}
			req := httptest.NewRequest(http.MethodPost, "/sms/send", strings.NewReader(`{}`))
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			a.echo.ServeHTTP(rec, req)
			if rec.Code != http.StatusBadRequest {
				t.Errorf("no number: status %d, want 400", rec.Code)
			}
			wantUsed(t, "after bad requests", a.ip, "192.0.2.1", 1)
		})
	}
}

// decisions keeps the last decision of each policy.
type decisions struct {
	mu   sync.Mutex
	last map[string]core.Decision
}

func (d *decisions) Observe(_ context.Context, e core.Event) {
	if e.Kind != core.EventDecision {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.last == nil {
		d.last = map[string]core.Decision{}
	}
	d.last[e.Policy] = e.Decision
}

func (d *decisions) of(policy string) core.Decision {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.last[policy]
}

// TestDailyRule: 10 sends spaced past the per-minute and per-hour rules
// but within a day; the 11th is denied by the 24 h rule, and RetryAfter is
// exactly the moment the first send leaves the day's window. Time is a
// stepped clock, µs-precise, with steps that are no whole number of
// seconds.
func TestDailyRule(t *testing.T) {
	start := time.Date(2026, 3, 1, 8, 0, 0, 123_456_000, time.UTC)
	const step = 13*time.Minute + 7*time.Second + 345_678*time.Microsecond
	tests := []struct {
		name      string
		store     func(t *testing.T) core.Store
		tolerance time.Duration
	}{
		{"memory", func(*testing.T) core.Store { return core.NewMemoryStore() }, 0},
		{"redis", func(t *testing.T) core.Store { return redisstore.New(redistest.Start(t).Client(t)) }, time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := drivertest.NewClock(start)
			seen := &decisions{}
			s := &recorder{}
			a := newTestApp(t, tc.store(t), s, testConfig(core.WithObserver(seen), core.WithClock(clk.Now)))
			for i := range 10 {
				if i > 0 {
					clk.Add(step)
				}
				wantAnswer(t, "send "+strconv.Itoa(i+1), send(t, a, "192.0.2.7", formats[i%len(formats)]), http.StatusAccepted, "")
			}
			clk.Add(step)
			want := start.Add(24 * time.Hour).Sub(clk.Now()) // 21h48m46.54322s
			ans := send(t, a, "192.0.2.7", formats[0])
			wantAnswer(t, "send 11", ans, http.StatusTooManyRequests, "sms-phone-86400s")
			if got := ans.retryAfter; got != strconv.FormatInt(guard.Seconds(want), 10) {
				t.Errorf("send 11: Retry-After %s, want %d (%v)", got, guard.Seconds(want), want)
			}
			d := seen.of("sms-phone")
			if d.Allowed || d.Rule != 2 || d.Source != core.SourceStore {
				t.Fatalf("send 11: decision %+v, want a store denial by rule 2 (10 per 24 h)", d)
			}
			if diff := (d.RetryAfter - want).Abs(); diff > tc.tolerance {
				t.Errorf("send 11: RetryAfter %v, want %v (first send + 24 h - now) within %v", d.RetryAfter, want, tc.tolerance)
			}
			for i, r := range d.Rules()[:2] {
				if r.RetryAfter != 0 {
					t.Errorf("send 11: rule %d (%d per %v) violated too: %+v", i, r.Limit, r.Window, r)
				}
			}
			t.Logf("send 11 denied by %d per %v: RetryAfter %v (want %v), Retry-After: %s",
				d.Limit, d.Window, d.RetryAfter, want, ans.retryAfter)
			if s.count() != 10 {
				t.Errorf("sent %d codes, want 10", s.count())
			}
		})
	}
}

// TestCombinedLimits: phone, client IP and the global cap are decided
// together; a request denied by one consumes nothing from the others. On
// Redis the three keys live in different hash slots.
func TestCombinedLimits(t *testing.T) {
	numbers := []string{"+8613800138000", "+8613900139000", "+8613700137000", "+8613600136000", "+8613500135000", "+8613300133000"}
	for _, sc := range stores {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			store := sc.new(t)
			cfg := testConfig()
			cfg.perIP = core.Rule{Limit: 3, Window: time.Hour}
			cfg.global = core.Rule{Limit: 5, Window: time.Hour}
			s := &recorder{}
			a := newTestApp(t, store, s, cfg)
			const x, y, z, w = "192.0.2.10", "192.0.2.20", "192.0.2.30", "192.0.2.40"

			for _, n := range numbers[:3] {
				wantAnswer(t, "x sends to "+n, send(t, a, x, n), http.StatusAccepted, "")
			}
			// Denied per IP: the phone and the global cap keep nothing.
			wantAnswer(t, "x over its IP limit", send(t, a, x, numbers[3]), http.StatusTooManyRequests, "sms-ip")
			wantUsed(t, "denied per IP", a.phone, phoneKey(numbers[3]), 0, 0, 0)
			wantUsed(t, "denied per IP", a.global, globalKey, 3)

			// Denied per phone: the IP and the global cap keep nothing.
			wantAnswer(t, "y to a number just sent to", send(t, a, y, numbers[0]), http.StatusTooManyRequests, "sms-phone-60s")
			wantUsed(t, "denied per phone", a.ip, y, 0)
			wantUsed(t, "denied per phone", a.global, globalKey, 3)

			// A failed delivery is not charged to anyone.
			s.setFail(true)
			if ans := send(t, a, y, numbers[3]); ans.status != http.StatusBadGateway {
				t.Fatalf("send with the provider down: %+v, want 502", ans)
			}
			s.setFail(false)
			wantUsed(t, "failed delivery", a.phone, phoneKey(numbers[3]), 0, 0, 0)
			wantUsed(t, "failed delivery", a.ip, y, 0)
			wantUsed(t, "failed delivery", a.global, globalKey, 3)

			// Denied by the global cap: neither phone nor IP keeps anything.
			wantAnswer(t, "y to a fresh number", send(t, a, y, numbers[3]), http.StatusAccepted, "")
			wantAnswer(t, "z to a fresh number", send(t, a, z, numbers[4]), http.StatusAccepted, "")
			wantAnswer(t, "w over the global cap", send(t, a, w, numbers[5]), http.StatusTooManyRequests, "sms-global")
			wantUsed(t, "denied globally", a.phone, phoneKey(numbers[5]), 0, 0, 0)
			wantUsed(t, "denied globally", a.ip, w, 0)
			if s.count() != 5 {
				t.Errorf("sent %d codes, want 5", s.count())
			}

			if rs, ok := store.(*redisstore.Store); ok {
				// The three keys of one request: different hash slots, so a
				// Redis Cluster could not decide them in one script.
				slots := redistest.Start(t, redistest.WithArgs("--cluster-enabled", "yes"))
				keys := []string{
					rs.Key("sms-phone", phoneKey(numbers[3])),
					rs.Key("sms-ip", y),
					rs.Key("sms-global", globalKey),
				}
				seen := map[int64]string{}
				for _, k := range keys {
					slot, _ := slots.Do(t, "CLUSTER", "KEYSLOT", k).(int64)
					if other, dup := seen[slot]; dup {
						t.Errorf("keys %s and %s share slot %d", other, k, slot)
					}
					seen[slot] = k
					t.Logf("key %s: slot %d", k, slot)
				}
			}
		})
	}
}

// TestRedisKeyPrivacy: after sends, no Redis key holds the number.
func TestRedisKeyPrivacy(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a := newTestApp(t, redisstore.New(srv.Client(t)), &recorder{}, testConfig())
	for _, f := range append(formats, "+8613900139000") {
		send(t, a, "192.0.2.1", f)
	}
	var keys []string
	for cursor := "0"; ; {
		reply, _ := srv.Do(t, "SCAN", cursor, "COUNT", 1000).([]any)
		if len(reply) != 2 {
			t.Fatalf("SCAN answered %v", reply)
		}
		cursor, _ = reply[0].(string)
		page, _ := reply[1].([]any)
		for _, k := range page {
			s, _ := k.(string)
			keys = append(keys, s)
		}
		if cursor == "0" {
			break
		}
	}
	phoneKeys := 0
	for _, k := range keys {
		for _, digits := range []string{"13800138000", "8613800138000", "13900139000"} {
			if strings.Contains(k, digits) {
				t.Errorf("Redis key %q holds the number's digits %q", k, digits)
			}
		}
		if strings.HasPrefix(k, "ratekit:sms-phone:{"+personal.PseudonymPrefix) {
			phoneKeys++
		}
	}
	if phoneKeys != 2 {
		t.Errorf("Redis holds %d phone keys, want 2: %q", phoneKeys, keys)
	}
	t.Logf("Redis keys after sends: %q", keys)
}

// fakeProvider is an SMS provider's HTTP API that counts the codes it
// gets, by number.
type fakeProvider struct {
	*httptest.Server
	mu   sync.Mutex
	sent []string
}

func newFakeProvider(t *testing.T) *fakeProvider {
	t.Helper()
	p := &fakeProvider{}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m struct{ To, Text string }
		if err := json.NewDecoder(r.Body).Decode(&m); err != nil || !strings.HasPrefix(m.Text, "Your code is ") {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		p.mu.Lock()
		p.sent = append(p.sent, m.To)
		p.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(p.Close)
	return p
}

func (p *fakeProvider) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.sent)
}

// TestProviderLimit: the provider's limit holds for the whole fleet. Two
// instances send 10 codes each at once under a limit of 10 per hour:
// exactly 10 reach the provider, the others give up at once as busy. Over
// the app, a code the provider's limit refuses is a 503 and charges
// nothing.
func TestProviderLimit(t *testing.T) {
	for _, sc := range []struct {
		name   string
		stores func(t *testing.T) (core.Store, core.Store)
	}{
		{"memory", func(*testing.T) (core.Store, core.Store) {
			s := core.NewMemoryStore()
			return s, s
		}},
		{"redis", func(t *testing.T) (core.Store, core.Store) {
			srv := redistest.Start(t)
			return redisstore.New(srv.Client(t)), redisstore.New(srv.Client(t))
		}},
	} {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			fake := newFakeProvider(t)
			cfg := testConfig()
			cfg.providerRate = core.Rule{Limit: 10, Window: time.Hour}
			s1, s2 := sc.stores(t)
			var busy, sent atomic.Int64
			var wg sync.WaitGroup
			for _, store := range []core.Store{s1, s2} {
				p, err := newProvider(store, fake.URL, cfg)
				if err != nil {
					t.Fatal(err)
				}
				for range 10 {
					wg.Go(func() {
						switch err := p.send(context.Background(), e164, "123456"); {
						case err == nil:
							sent.Add(1)
						case errors.Is(err, errProviderBusy):
							busy.Add(1)
						default:
							t.Errorf("send: %v", err)
						}
					})
				}
			}
			wg.Wait()
			if sent.Load() != 10 || busy.Load() != 10 || fake.count() != 10 {
				t.Errorf("%d sent, %d busy, %d reached the provider; want 10, 10, 10", sent.Load(), busy.Load(), fake.count())
			}

			// Over the app: the provider's limit is full for an hour.
			p, err := newProvider(s1, fake.URL, cfg)
			if err != nil {
				t.Fatal(err)
			}
			a := newTestApp(t, s1, p, cfg)
			ans := send(t, a, "192.0.2.50", formats[0])
			if ans.status != http.StatusServiceUnavailable {
				t.Fatalf("send with the provider's limit full: %+v, want 503", ans)
			}
			wantUsed(t, "provider busy", a.phone, phoneKey(e164), 0, 0, 0)
			wantUsed(t, "provider busy", a.ip, "192.0.2.50", 0)
			if fake.count() != 10 {
				t.Errorf("%d codes reached the provider, want 10", fake.count())
			}
		})
	}
}

// TestProviderWaits: sends over the provider's limit wait for their turn
// and all go out.
func TestProviderWaits(t *testing.T) {
	t.Parallel()
	fake := newFakeProvider(t)
	cfg := testConfig()
	cfg.providerRate = core.Rule{Limit: 2, Window: 100 * time.Millisecond}
	p, err := newProvider(core.NewMemoryStore(), fake.URL, cfg)
	if err != nil {
		t.Fatal(err)
	}
	a := newTestApp(t, core.NewMemoryStore(), p, cfg)
	numbers := []string{"+8613800138000", "+8613900139000", "+8613700137000", "+8613600136000", "+8613500135000"}
	var wg sync.WaitGroup
	for _, n := range numbers {
		wg.Go(func() {
			if ans := send(t, a, "192.0.2.60", n); ans.status != http.StatusAccepted {
				t.Errorf("send to %s: %+v, want 202 after waiting", n, ans)
			}
		})
	}
	wg.Wait()
	if fake.count() != len(numbers) {
		t.Errorf("%d codes reached the provider, want %d", fake.count(), len(numbers))
	}
}

// TestCountingProvider: the -provider-stub provider counts the sends of
// each second of its clock and prints a second once it is over.
func TestCountingProvider(t *testing.T) {
	var (
		out strings.Builder
		now = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	)
	p := &countingProvider{out: &out, now: func() time.Time { return now }}
	send := func(at time.Duration) {
		now = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Add(at)
		rec := httptest.NewRecorder()
		p.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/send", strings.NewReader(`{"to":"+8613800138000"}`)))
		if rec.Code != http.StatusAccepted {
			t.Fatalf("send: %d, want 202", rec.Code)
		}
	}
	send(100 * time.Millisecond)
	send(900 * time.Millisecond)
	send(1200 * time.Millisecond)
	now = now.Add(3 * time.Second)
	p.record(false)
	want := fmt.Sprintf("provider: 2 sends in second %s\nprovider: 1 sends in second %s\n",
		time.Unix(now.Unix()-4, 0).Format("15:04:05"), time.Unix(now.Unix()-3, 0).Format("15:04:05"))
	if out.String() != want {
		t.Errorf("printed %q, want %q", out.String(), want)
	}
}

// TestProviderRateWatched: what the throttle command of docs/jobs.md shows. With
// -provider-rate 5, ten codes sent at once all reach the stand-in
// provider, five at once and five a second later, rather than being
// refused.
func TestProviderRateWatched(t *testing.T) {
	var out syncWriter
	stub := &countingProvider{out: &out, now: time.Now}
	srv := httptest.NewServer(stub)
	t.Cleanup(srv.Close)
	cfg := defaultConfig()
	cfg.providerRate = core.Rule{Limit: 5, Window: time.Second} // -provider-rate 5
	cfg.limiterOptions = []core.Option{core.WithTimeout(2 * time.Second)}
	p, err := newProvider(core.NewMemoryStore(), srv.URL+"/send", cfg)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Int64
	for i := range 10 {
		wg.Go(func() {
			if err := p.send(context.Background(), fmt.Sprintf("+861380013800%d", i), "123456"); err != nil {
				failed.Add(1)
				t.Errorf("send %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
	stub.record(false)
	total := 0
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var n int
		if _, err := fmt.Sscanf(line, "provider: %d sends in second", &n); err != nil {
			t.Fatalf("stub line %q: %v", line, err)
		}
		total += n
	}
	if total != 10 || failed.Load() != 0 || elapsed < 900*time.Millisecond {
		t.Errorf("the stub counted %d sends (want 10), %d failed (want 0), in %v (want the second five to wait about a second):\n%s",
			total, failed.Load(), elapsed, out.String())
	}
}

// syncWriter is a strings.Builder safe for concurrent writes.
type syncWriter struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
