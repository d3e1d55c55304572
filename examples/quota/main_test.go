package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
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
	"github.com/ratekit/ratekit/redisstore"
)

const adminToken = "test-admin-token"

// testConfig is the example's configuration with an admin token and a
// store timeout generous enough that a loaded machine under -race never
// makes a decision fall back to the in-process store.
func testConfig(opts ...core.Option) config {
	cfg := defaultConfig()
	cfg.adminToken = adminToken
	cfg.limiterOptions = append([]core.Option{core.WithTimeout(2 * time.Second)}, opts...)
	return cfg
}

func newTestApp(t testing.TB, store core.Store, cfg config) *app {
	t.Helper()
	p, err := newPlans(newMemoryTable(), map[string]string{"k-free": "free", "k-pro": "pro"})
	if err != nil {
		t.Fatalf("newPlans: %v", err)
	}
	a, err := newApp(store, p, cfg)
	if err != nil {
		t.Fatalf("newApp: %v", err)
	}
	t.Cleanup(func() { _ = a.fiber.Shutdown() })
	return a
}

// stores are the stores every scenario runs on; the Redis case starts a
// redis-server of its own (skipped with -short).
var stores = []struct {
	name string
	new  func(t *testing.T) core.Store
}{
	{"memory", func(*testing.T) core.Store { return core.NewMemoryStore() }},
	{"redis", func(t *testing.T) core.Store { return redisstore.New(redistest.Start(t).Client(t)) }},
}

// answer is what a request got.
type answer struct {
	status    int
	limit     string // X-RateLimit-Limit
	remaining string // X-RateLimit-Remaining
	retry     string // Retry-After
	body      string
}

func (a answer) String() string {
	return fmt.Sprintf("%d limit=%s remaining=%s retry=%s %q", a.status, a.limit, a.remaining, a.retry, a.body)
}

func do(t *testing.T, a *app, method, path, key, body string, header ...string) answer {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := a.fiber.Test(req, -1)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return answer{
		status:    res.StatusCode,
		limit:     res.Header.Get(guard.HeaderLimit),
		remaining: res.Header.Get(guard.HeaderRemaining),
		retry:     res.Header.Get(guard.HeaderRetryAfter),
		body:      string(b),
	}
}

func getItems(t *testing.T, a *app, key string) answer {
	t.Helper()
	return do(t, a, http.MethodGet, "/api/items", key, "")
}

func postReport(t *testing.T, a *app, key string) answer {
	t.Helper()
	return do(t, a, http.MethodPost, "/api/reports", key, "")
}

func quota(t *testing.T, a *app, key string) quotaStatus {
	t.Helper()
	ans := do(t, a, http.MethodGet, "/quota", key, "")
	if ans.status != http.StatusOK {
		t.Fatalf("GET /quota: %v", ans)
	}
	var st quotaStatus
	if err := json.Unmarshal([]byte(ans.body), &st); err != nil {
		t.Fatalf("GET /quota: %v: %v", ans, err)
	}
	return st
}

func wantAnswer(t *testing.T, what string, got answer, status int, remaining string) {
	t.Helper()
	if got.status != status || got.remaining != remaining {
		t.Fatalf("%s: %v, want %d with X-RateLimit-Remaining %s", what, got, status, remaining)
	}
}

// violated returns the violated-policies of a problem body.
func violated(t *testing.T, ans answer) []string {
	t.Helper()
	var p struct {
		Violated []string `json:"violated-policies"`
	}
	if err := json.Unmarshal([]byte(ans.body), &p); err != nil {
		t.Fatalf("body of %v is not a problem: %v", ans, err)
	}
	return p.Violated
}

// TestCostAndStatus: a report costs 10 units, an item 1; GET /quota shows
// the remaining quota without consuming any.
func TestCostAndStatus(t *testing.T) {
	for _, sc := range stores {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			a := newTestApp(t, sc.new(t), testConfig())
			want := quotaStatus{Plan: "free", Limits: []limitState{
				{Limit: 100, WindowSeconds: 60, Remaining: 100},
				{Limit: 1000, WindowSeconds: 86400, Remaining: 1000},
			}}
			for range 3 {
				if got := quota(t, a, "k-free"); !equalStatus(got, want) {
					t.Fatalf("GET /quota of a fresh key: %+v, want %+v", got, want)
				}
			}

			for i := range 9 {
				wantAnswer(t, "report "+strconv.Itoa(i+1), postReport(t, a, "k-free"), http.StatusOK, strconv.Itoa(90-10*i))
			}
			for i := range 5 {
				wantAnswer(t, "item "+strconv.Itoa(i+1), getItems(t, a, "k-free"), http.StatusOK, strconv.Itoa(9-i))
			}
			// 5 units left: a report (10) does not fit, items still do.
			ans := postReport(t, a, "k-free")
			wantAnswer(t, "report over the quota", ans, http.StatusTooManyRequests, "5")
			if v := violated(t, ans); len(v) != 1 || v[0] != "quota-api-60s" || ans.retry == "" || ans.limit != "100" {
				t.Errorf("report over the quota: %v, violated %v; want Retry-After and quota-api-60s", ans, v)
			}
			for i := range 5 {
				wantAnswer(t, "item after the denied report", getItems(t, a, "k-free"), http.StatusOK, strconv.Itoa(4-i))
			}
			wantAnswer(t, "item over the quota", getItems(t, a, "k-free"), http.StatusTooManyRequests, "0")

			for range 3 {
				got := quota(t, a, "k-free")
				if len(got.Limits) != 2 || got.Limits[0].Used != 100 || got.Limits[0].Remaining != 0 ||
					got.Limits[1].Used != 100 || got.Limits[1].Remaining != 900 || got.Limits[0].ResetSeconds < 1 {
					t.Fatalf("GET /quota after 100 units: %+v, want 100 used of each rule", got)
				}
			}
			// Another key is not affected.
			if got := quota(t, a, "k-pro"); got.Plan != "pro" || got.Limits[0].Remaining != 1000 || got.Limits[1].Remaining != 100_000 {
				t.Errorf("GET /quota of k-pro: %+v, want untouched pro limits", got)
			}

			// Unknown keys are refused before the limiter.
			for _, key := range []string{"", "k-unknown"} {
				for _, path := range []string{"/api/items", "/quota"} {
					if ans := do(t, a, http.MethodGet, path, key, ""); ans.status != http.StatusUnauthorized || ans.limit != "" {
						t.Errorf("GET %s with key %q: %v, want 401 without rate-limit headers", path, key, ans)
					}
				}
			}
		})
	}
}

func equalStatus(a, b quotaStatus) bool {
	if a.Plan != b.Plan || len(a.Limits) != len(b.Limits) {
		return false
	}
	for i := range a.Limits {
		if a.Limits[i] != b.Limits[i] {
			return false
		}
	}
	return true
}

// TestUpgrade: a key moved from free to pro gets the higher limit on its
// next request; neither the tier cache nor a denial cached under the free
// plan answers for it.
func TestUpgrade(t *testing.T) {
	for _, sc := range stores {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			var cached atomic.Int64 // denials answered by the deny cache
			a := newTestApp(t, sc.new(t), testConfig(core.WithObserver(core.ObserverFunc(func(_ context.Context, e core.Event) {
				if e.Kind == core.EventDecision && e.Decision.Source == core.SourceCache {
					cached.Add(1)
				}
			}))))
			for range 10 {
				postReport(t, a, "k-free")
			}
			// Denied from then on; on Redis, from the deny cache once the
			// limiter has subscribed to invalidations (it forgets its cached
			// tiers then), which the step after next needs.
			deadline := time.Now().Add(5 * time.Second)
			for i := 0; i < 3 || sc.name == "redis" && cached.Load() == 0; i++ {
				wantAnswer(t, "free key over its quota", getItems(t, a, "k-free"), http.StatusTooManyRequests, "0")
				if time.Now().After(deadline) {
					t.Fatal("the limiter never answered from its deny cache")
				}
			}
			// On Redis a limiter forgets its cached tiers once more when
			// its invalidation subscription starts (a change published
			// before then would be missed), so the first lookup may be
			// made twice.
			if n, most := a.plans.lookups.Load(), map[string]int64{"memory": 1, "redis": 2}[sc.name]; n < 1 || n > most {
				t.Errorf("the plan was looked up %d times for 13 requests, want 1 to %d (cached)", n, most)
			}

			// Without the admin call the change waits for the tier cache.
			_ = a.plans.set(context.Background(), "k-free", "pro")
			wantAnswer(t, "plan changed behind the limiter's back", getItems(t, a, "k-free"), http.StatusTooManyRequests, "0")
			_ = a.plans.set(context.Background(), "k-free", "free")

			for _, bad := range []struct{ token, body string }{
				{"wrong", `{"key":"k-free","plan":"pro"}`},
				{adminToken, `{"key":"k-free","plan":"platinum"}`},
				{adminToken, `{"plan":"pro"}`},
			} {
				ans := do(t, a, http.MethodPost, "/admin/plan", "", bad.body, "Authorization", "Bearer "+bad.token)
				if ans.status != http.StatusUnauthorized && ans.status != http.StatusBadRequest {
					t.Errorf("POST /admin/plan %s with token %q: %v, want 401 or 400", bad.body, bad.token, ans)
				}
			}
			if ans := do(t, a, http.MethodPost, "/admin/plan", "", `{"key":"k-free","plan":"pro"}`, "Authorization", "Bearer "+adminToken); ans.status != http.StatusOK {
				t.Fatalf("POST /admin/plan: %v, want 200", ans)
			}
			ans := getItems(t, a, "k-free")
			wantAnswer(t, "first request after the upgrade", ans, http.StatusOK, "899")
			if ans.limit != "1000" {
				t.Errorf("first request after the upgrade: X-RateLimit-Limit %s, want 1000", ans.limit)
			}
			if got := quota(t, a, "k-free"); got.Plan != "pro" || got.Limits[1].Used != 101 || got.Limits[1].Remaining != 99_899 {
				t.Errorf("GET /quota after the upgrade: %+v, want pro with the 101 units used so far", got)
			}
		})
	}
}

// TestExports: at most 2 exports of a key run at once; a third is
// refused with 429, Retry-After 1 and a problem naming the exports limit,
// without spending quota; each export costs one unit of the quota; and
// an export over the quota does not hold an export slot.
func TestExports(t *testing.T) {
	for _, sc := range stores {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig()
			arrived, release := make(chan struct{}, 4), make(chan struct{})
			cfg.export = func(context.Context) {
				arrived <- struct{}{}
				<-release
			}
			a := newTestApp(t, sc.new(t), cfg)
			postExport := func() answer { return do(t, a, http.MethodPost, "/api/exports", "k-free", "") }
			held := make(chan answer, 2)
			for range 2 {
				go func() { held <- postExport() }()
			}
			for range 2 {
				select {
				case <-arrived:
				case <-time.After(10 * time.Second):
					t.Fatal("two exports did not start within 10s")
				}
			}
			ans := postExport()
			if ans.status != http.StatusTooManyRequests || ans.retry != "1" || ans.limit != "2" || ans.remaining != "0" {
				t.Fatalf("third export while two run: %v, want 429, Retry-After 1, X-RateLimit-Limit 2, Remaining 0", ans)
			}
			if v := violated(t, ans); len(v) != 1 || v[0] != "quota-exports" {
				t.Errorf("third export: violated %v, want [quota-exports]", v)
			}
			close(release)
			for range 2 {
				if ans := <-held; ans.status != http.StatusOK || ans.body != "item,count\napple,3\n" {
					t.Errorf("held export: %v, want 200 with the CSV", ans)
				}
			}
			if got := quota(t, a, "k-free"); got.Limits[0].Used != 2 {
				t.Errorf("quota after 2 exports and a refused one: %d used, want 2", got.Limits[0].Used)
			}
			// Spend the rest of the minute's quota: exports are then refused
			// by the quota, and hold no export slot.
			for range 9 {
				postReport(t, a, "k-free")
			}
			for range 8 {
				getItems(t, a, "k-free")
			}
			for range 3 {
				ans := postExport()
				if v := violated(t, ans); ans.status != http.StatusTooManyRequests || len(v) != 1 || v[0] != "quota-api-60s" {
					t.Fatalf("export over the quota: %v, violated %v; want 429 naming quota-api-60s", ans, v)
				}
			}
			if d, err := a.exports.Peek(context.Background(), "k-free"); err != nil || d.Remaining != 2 {
				t.Errorf("exports in flight after denials by the quota: %+v, %v; want 2 remaining", d, err)
			}
		})
	}
}

// TestUpgradeOnEveryInstance: two instances share one Redis, for their
// limits and their plan table. A key moved to pro through one instance's
// admin route gets the pro limit on the other too, at once: the
// invalidation reaches the other instance's tier cache (a minute long)
// through Redis. (TestPlansAcrossProcesses runs two processes.)
func TestUpgradeOnEveryInstance(t *testing.T) {
	srv := redistest.Start(t)
	newInstance := func() *app {
		p, err := newPlans(redisTable{rdb: srv.Client(t), hash: plansHash}, map[string]string{"k-free": "free"})
		if err != nil {
			t.Fatalf("newPlans: %v", err)
		}
		a, err := newApp(redisstore.New(srv.Client(t)), p, testConfig())
		if err != nil {
			t.Fatalf("newApp: %v", err)
		}
		t.Cleanup(func() { _ = a.fiber.Shutdown() })
		return a
	}
	a, b := newInstance(), newInstance()
	for range 10 {
		postReport(t, a, "k-free")
	}
	wantAnswer(t, "B: free key over its quota", getItems(t, b, "k-free"), http.StatusTooManyRequests, "0")
	if ans := do(t, a, http.MethodPost, "/admin/plan", "", `{"key":"k-free","plan":"pro"}`, "Authorization", "Bearer "+adminToken); ans.status != http.StatusOK {
		t.Fatalf("POST /admin/plan on A: %v, want 200", ans)
	}
	start := time.Now()
	for {
		ans := getItems(t, b, "k-free")
		if ans.status == http.StatusOK {
			if ans.limit != "1000" || ans.remaining != "899" {
				t.Errorf("B after the upgrade: %v, want limit 1000, remaining 899", ans)
			}
			t.Logf("B applies the pro plan %v after the admin call on A", time.Since(start).Round(time.Millisecond))
			break
		}
		if time.Since(start) > 2*time.Second {
			t.Fatalf("B still applies the free plan 2 s after the upgrade on A: %v", ans)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var epoch = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

// TestNeverOverAdmits: with a small plan (5 per minute, 20 per day) and a
// request every 3 s of simulated time across a day boundary, no sliding
// minute or day ever holds more admissions than its limit; and of 50
// concurrent requests of a pro key (10 per minute) exactly 10 are
// admitted.
func TestNeverOverAdmits(t *testing.T) {
	small := func(opts ...core.Option) config {
		cfg := testConfig(opts...)
		cfg.tiers = map[string][]core.Rule{
			"free": {{Limit: 5, Window: time.Minute}, {Limit: 20, Window: 24 * time.Hour}},
			"pro":  {{Limit: 10, Window: time.Minute}, {Limit: 40, Window: 24 * time.Hour}},
		}
		return cfg
	}
	tests := []struct {
		name  string
		store func(t *testing.T) core.Store
	}{
		{"memory", func(*testing.T) core.Store { return core.NewMemoryStore() }},
		{"redis", func(t *testing.T) core.Store { return redisstore.New(redistest.Start(t).Client(t)) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := drivertest.NewClock(epoch)
			a := newTestApp(t, tc.store(t), small(core.WithClock(clk.Now)))
			ctx := context.Background()

			var admitted []time.Time
			step := func(from, to time.Duration) {
				for clk.Now().Before(epoch.Add(to)) {
					now := clk.Add(3 * time.Second)
					if now.Before(epoch.Add(from)) {
						continue
					}
					d, err := a.quota.Allow(ctx, "k-free")
					if err != nil || d.Source.Fallback() {
						t.Fatalf("Allow at %v: %+v, %v", now.Sub(epoch), d, err)
					}
					if d.Allowed {
						admitted = append(admitted, now)
					} else if d.RetryAfter <= 0 {
						t.Fatalf("denial at %v without RetryAfter: %+v", now.Sub(epoch), d)
					}
				}
			}
			step(0, 10*time.Minute)
			if len(admitted) != 20 {
				t.Errorf("first 10 minutes: %d admitted, want the daily 20", len(admitted))
			}
			clk.Add(24*time.Hour - 15*time.Minute)
			step(24*time.Hour-5*time.Minute, 24*time.Hour+30*time.Minute)
			for i, at := range admitted {
				var minute, day int
				for _, b := range admitted[:i+1] {
					if at.Sub(b) < time.Minute {
						minute++
					}
					if at.Sub(b) < 24*time.Hour {
						day++
					}
				}
				if minute > 5 || day > 20 {
					t.Fatalf("admission at %v: %d in the minute and %d in the day before it, limits 5 and 20", at.Sub(epoch), minute, day)
				}
			}
			if n := len(admitted); n < 25 {
				t.Errorf("%d admitted in all, want the next day's budget to open up", n)
			}
			t.Logf("%d admissions; first of the second day at %v", len(admitted), admitted[20].Sub(epoch))

			// 50 concurrent requests of a fresh key over HTTP: exactly 5.
			var (
				wg     sync.WaitGroup
				mu     sync.Mutex
				counts = map[int]int{}
			)
			for range 50 {
				wg.Go(func() {
					req := httptest.NewRequest(http.MethodGet, "/api/items", nil)
					req.Header.Set("X-API-Key", "k-pro")
					res, err := a.fiber.Test(req, -1)
					if err != nil {
						t.Error(err)
						return
					}
					res.Body.Close()
					mu.Lock()
					counts[res.StatusCode]++
					mu.Unlock()
				})
			}
			wg.Wait()
			if counts[http.StatusOK] != 10 || counts[http.StatusTooManyRequests] != 40 {
				t.Errorf("50 concurrent requests against 10 per minute: %v, want 10×200 and 40×429", counts)
			}
		})
	}
}

// TestRedisMemoryBounded: a 100,000-per-day quota on Redis, after 20,000
// admissions spread over a simulated day, keeps its key in a few KB.
func TestRedisMemoryBounded(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	clk := drivertest.NewClock(epoch)
	store := redisstore.New(srv.Client(t))
	a := newTestApp(t, store, testConfig(core.WithClock(clk.Now)))
	ctx := context.Background()
	key := store.Key("quota-api", "k-pro") + ":b"

	const n = 20_000
	step := 24 * time.Hour / n // 4.32 s
	var peak int64
	for i := 1; i <= n; i++ {
		clk.Add(step)
		d, err := a.quota.Allow(ctx, "k-pro")
		if err != nil || !d.Allowed || d.Source != core.SourceStore {
			t.Fatalf("request %d: %+v, %v; want admitted by the store", i, d, err)
		}
		if i%2000 == 0 {
			mem, _ := srv.Do(t, "MEMORY", "USAGE", key, "SAMPLES", "0").(int64)
			fields, _ := srv.Do(t, "HLEN", key).(int64)
			peak = max(peak, mem)
			t.Logf("after %6d admissions (%5.1f h): MEMORY USAGE %d bytes, %d hash fields", i, clk.Now().Sub(epoch).Hours(), mem, fields)
		}
	}
	if peak == 0 || peak >= 4096 {
		t.Errorf("MEMORY USAGE peaked at %d bytes, want under 4 KB", peak)
	}
	if got := quota(t, a, "k-pro"); got.Limits[1].Used != n || got.Limits[1].Remaining != 100_000-n {
		t.Errorf("GET /quota: %+v, want %d of 100000 used today", got, n)
	}

	// The worst case: a key busy every second has every bucket of both
	// windows live. The hash is still bounded by the bucket count (61 per
	// rule, plus 17 fields remembering recent call IDs); its encoding, and
	// so its size, depends on the server's hash-max-listpack-entries.
	for range 2 * 61 {
		clk.Add(time.Second)
		if d, err := a.quota.AllowN(ctx, "k-pro", 10); err != nil || !d.Allowed {
			t.Fatalf("busy key: %+v, %v", d, err)
		}
	}
	mem, _ := srv.Do(t, "MEMORY", "USAGE", key, "SAMPLES", "0").(int64)
	fields, _ := srv.Do(t, "HLEN", key).(int64)
	enc := srv.Do(t, "OBJECT", "ENCODING", key)
	limit := srv.Do(t, "CONFIG", "GET", "hash-max-listpack-entries")
	t.Logf("busy every second: MEMORY USAGE %d bytes, %d hash fields, %v encoding (%v)", mem, fields, enc, limit)
	const defaultBuckets = 60 // core.Policy.Buckets when 0
	if maxFields := int64(2*(defaultBuckets+1) + 17); fields > maxFields || mem >= 16<<10 {
		t.Errorf("busy key: %d fields and %d bytes, want at most %d fields and under 16 KB", fields, mem, maxFields)
	}
}

// BenchmarkRedisQuota measures one decision on a 100,000-per-day
// SlidingBuckets quota on Redis with 0 to 90,000 units already in the
// day's window: the time per decision does not grow with the count.
func BenchmarkRedisQuota(b *testing.B) {
	srv := redistest.Start(b)
	for _, used := range []int{0, 10_000, 50_000, 90_000} {
		b.Run("used="+strconv.Itoa(used), func(b *testing.B) {
			clk := drivertest.NewClock(epoch)
			store := redisstore.New(srv.Client(b), redisstore.WithPrefix("bench"+strconv.Itoa(used)))
			a := newTestApp(b, store, testConfig(core.WithDenyCache(0), core.WithClock(clk.Now)))
			ctx := context.Background()
			for range used / 1000 {
				// 1000 units a minute, the pro plan's per-minute limit.
				clk.Add(time.Minute + time.Second)
				if d, err := a.quota.AllowN(ctx, "k-pro", 1000); err != nil || !d.Allowed {
					b.Fatalf("preload: %+v, %v", d, err)
				}
			}
			clk.Add(time.Minute + time.Second)
			b.ReportAllocs()
			for b.Loop() {
				clk.Add(60 * time.Millisecond) // 1000 a minute
				if _, err := a.quota.Allow(ctx, "k-pro"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
