// Command quota shows per-customer API quotas with ratekit on fiber. Each
// API key (X-API-Key header or api_key query parameter) has a plan, and
// the plan sets its limits, which must all hold:
//
//	free  100 per minute and   1,000 per day
//	pro  1000 per minute and 100,000 per day
//
// The plan of a key is looked up in the app's plan table by a function
// the limiter calls on a cache miss (cached for a minute). The table is
// where every instance reads it: with REDIS_URL set, a Redis hash
// (quota:plans, next to the limits), so that a plan changed through one
// instance holds on all of them and after a restart; without it, this
// process's memory, like the limits. The quota uses
// the SlidingBuckets algorithm: each window is kept as 60 counters, so a
// daily quota of 100,000 takes a few KB per key in Redis however many
// requests it counts, where the exact sliding log would keep one entry
// per request. It never admits more than a limit and under-admits by at
// most one bucket (1/60 of the window).
//
//	GET  /api/items    costs 1
//	POST /api/reports  costs 10 (an expensive endpoint)
//	POST /api/exports  costs 1; a long export, at most 2 in flight per key
//	GET  /quota        the key's plan and remaining quota, consuming none
//	POST /admin/plan   {"key": "...", "plan": "pro"} moves a key to
//	                   another plan at once; needs QUOTA_ADMIN_TOKEN
//
// Requests over the quota get 429 with Retry-After, the X-RateLimit-* and
// IETF RateLimit fields, and an RFC 9457 problem+json body naming the
// binding rule ("quota-api-60s" or "quota-api-86400s"). Unknown keys get 401. The demo
// keys are demo-free and demo-pro:
//
//	QUOTA_ADMIN_TOKEN=s3cret go run ./examples/quota
//	curl -i -H 'X-API-Key: demo-free' localhost:8083/api/items
//	curl -i -X POST -H 'X-API-Key: demo-free' localhost:8083/api/reports
//	for i in 1 2 3; do curl -s -o /dev/null -w '%{http_code} ' -X POST -H 'X-API-Key: demo-free' localhost:8083/api/exports & done; wait
//	curl -s -H 'X-API-Key: demo-free' localhost:8083/quota
//	curl -i -H 'Authorization: Bearer s3cret' -H 'Content-Type: application/json' \
//	     -d '{"key":"demo-free","plan":"pro"}' localhost:8083/admin/plan
//
// The key is stored in Redis as sent; an app whose API keys are secrets
// would key the quota by the account its authentication middleware finds
// (keyfunc.UserIDFrom) instead. Flags: -addr (127.0.0.1:8083) and
// -failure-policy local|open|closed, as in every example (no
// -trusted-proxy: nothing here is keyed by address). Limits live in
// memory; set REDIS_URL to keep them in Redis.
//
// Several instances on one Redis share every key's usage and the plan
// table, and a plan change made through one instance's POST /admin/plan
// reaches the others' cached plans and cached denials at once
// (Limiter.InvalidateTier publishes it through Redis). A plan changed in
// the table without that call takes effect on each instance within the
// plan cache's minute. The demo keys are put in the table at start unless
// it has them already, so a restart keeps their changed plans.
package main

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/examples/internal/exampleenv"
	"github.com/ratekit/ratekit/fiberlimit"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/keyfunc"
)

// costReport is what POST /api/reports costs.
const costReport = 10

func main() {
	flags := exampleenv.Parse("127.0.0.1:8083", exampleenv.NotByIP)

	cfg := defaultConfig()
	cfg.adminToken = os.Getenv("QUOTA_ADMIN_TOKEN")
	cfg.limiterOptions = flags.Options()
	if cfg.adminToken == "" {
		log.Print("QUOTA_ADMIN_TOKEN is not set: POST /admin/plan is disabled")
	}
	table, where := planTableFromEnv()
	p, err := newPlans(table, map[string]string{"demo-free": "free", "demo-pro": "pro"})
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("plans: %s", where)
	a, err := newApp(exampleenv.Store(), p, cfg)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("listening on %s: try `curl -i -H 'X-API-Key: demo-free' http://%s/api/items`", flags.Addr, flags.Addr)
	log.Fatal(a.fiber.Listen(flags.Addr))
}

// config holds the plans' limits; tests change them.
type config struct {
	tiers          map[string][]core.Rule    // limits per plan
	defaultTier    string                    // the plan whose limits apply when a key's plan cannot be found
	tierCacheTTL   time.Duration             // how long a key's plan is cached
	adminToken     string                    // bearer token of POST /admin/plan; "" disables it
	limiterOptions []core.Option             // options of the limiters
	export         func(ctx context.Context) // the work of an export
}

func defaultConfig() config {
	return config{
		tiers: map[string][]core.Rule{
			"free": {{Limit: 100, Window: time.Minute}, {Limit: 1000, Window: 24 * time.Hour}},
			"pro":  {{Limit: 1000, Window: time.Minute}, {Limit: 100_000, Window: 24 * time.Hour}},
		},
		defaultTier:  "free",
		tierCacheTTL: time.Minute,
		export: func(ctx context.Context) {
			// Stands in for a long export.
			select {
			case <-time.After(3 * time.Second):
			case <-ctx.Done():
			}
		},
	}
}

// planTable maps API keys to plan names. Every instance must read the
// same one for a plan change to hold everywhere: a real app keeps it in
// its database.
type planTable interface {
	// get returns the plan of key; ok is false for a key without one.
	get(ctx context.Context, key string) (plan string, ok bool, err error)
	// put puts key on plan.
	put(ctx context.Context, key, plan string) error
	// seed puts key on plan unless the table has a plan for it already.
	seed(ctx context.Context, key, plan string) error
}

// planTableFromEnv returns the table of the example: a Redis hash on
// REDIS_URL when it is set, else this process's memory; and says which.
func planTableFromEnv() (planTable, string) {
	url := os.Getenv("REDIS_URL")
	if url == "" {
		return newMemoryTable(), "in this process's memory: a plan changed here holds on this instance only (set REDIS_URL to share them)"
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		log.Fatal("REDIS_URL is not a valid redis:// URL") // it may hold a password: do not print it
	}
	return redisTable{rdb: redis.NewClient(opt), hash: plansHash}, "in the Redis hash " + plansHash + " at " + opt.Addr + ", shared by every instance"
}

// plansHash is the Redis hash of the plan table: field API key, value plan.
const plansHash = "quota:plans"

// memoryTable is a plan table in this process's memory.
type memoryTable struct {
	mu    sync.RWMutex
	byKey map[string]string
}

func newMemoryTable() *memoryTable { return &memoryTable{byKey: map[string]string{}} }

func (m *memoryTable) get(_ context.Context, key string) (string, bool, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	plan, ok := m.byKey[key]
	return plan, ok, nil
}

func (m *memoryTable) put(_ context.Context, key, plan string) error {
	m.mu.Lock()
	m.byKey[key] = plan
	m.mu.Unlock()
	return nil
}

func (m *memoryTable) seed(_ context.Context, key, plan string) error {
	m.mu.Lock()
	if _, ok := m.byKey[key]; !ok {
		m.byKey[key] = plan
	}
	m.mu.Unlock()
	return nil
}

// redisTable is a plan table in a Redis hash, read by every instance.
type redisTable struct {
	rdb  redis.UniversalClient
	hash string
}

func (r redisTable) get(ctx context.Context, key string) (string, bool, error) {
	plan, err := r.rdb.HGet(ctx, r.hash, key).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("quota: plan table: %w", err)
	}
	return plan, true, nil
}

func (r redisTable) put(ctx context.Context, key, plan string) error {
	if err := r.rdb.HSet(ctx, r.hash, key, plan).Err(); err != nil {
		return fmt.Errorf("quota: plan table: %w", err)
	}
	return nil
}

func (r redisTable) seed(ctx context.Context, key, plan string) error {
	if err := r.rdb.HSetNX(ctx, r.hash, key, plan).Err(); err != nil {
		return fmt.Errorf("quota: plan table: %w", err)
	}
	return nil
}

// plans is the app's view of the plan table. It is safe for concurrent
// use.
type plans struct {
	table   planTable
	lookups atomic.Int64 // resolutions by the limiter; its cache keeps them few
}

var errUnknownKey = errors.New("quota: unknown API key")

// newPlans returns the plans of table, after putting each key of seeds on
// its plan unless the table has one for it already.
func newPlans(table planTable, seeds map[string]string) (*plans, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for k, plan := range seeds {
		if err := table.seed(ctx, k, plan); err != nil {
			return nil, err
		}
	}
	return &plans{table: table}, nil
}

// plan returns the plan of key.
func (p *plans) plan(ctx context.Context, key string) (string, bool, error) {
	return p.table.get(ctx, key)
}

// set puts key on plan.
func (p *plans) set(ctx context.Context, key, plan string) error {
	return p.table.put(ctx, key, plan)
}

// resolve names the tier of a key for the limiter (core.WithTiers).
func (p *plans) resolve(ctx context.Context, key string) (string, error) {
	p.lookups.Add(1)
	plan, ok, err := p.plan(ctx, key)
	switch {
	case err != nil:
		return "", err
	case !ok:
		return "", errUnknownKey
	}
	return plan, nil
}

// app is the API service: its routes, the quota limiter and the plans.
type app struct {
	fiber   *fiber.App
	quota   *core.Limiter
	exports *core.Limiter
	plans   *plans
	tiers   map[string][]core.Rule
}

// newApp builds the service on store.
func newApp(store core.Store, p *plans, cfg config) (*app, error) {
	quota, err := core.NewLimiter(store, core.Policy{
		Name:      "quota-api",
		Rules:     cfg.tiers[cfg.defaultTier],
		Algorithm: core.SlidingBuckets, // bounded memory per key, however large the quota
	}, append([]core.Option{
		core.WithTiers(p.resolve, cfg.tiers),
		core.WithTierCache(10_000, cfg.tierCacheTTL),
	}, cfg.limiterOptions...)...)
	if err != nil {
		return nil, err
	}
	exports, err := core.NewLimiter(store, core.Policy{Name: "quota-exports", InFlight: 2}, cfg.limiterOptions...)
	if err != nil {
		return nil, err
	}
	a := &app{
		fiber:   fiber.New(fiber.Config{ErrorHandler: answerError, DisableStartupMessage: true}),
		quota:   quota,
		exports: exports,
		plans:   p,
		tiers:   cfg.tiers,
	}

	// Each route states its cost where it is mounted, rather than one
	// middleware guessing it from the path (fiber matches paths
	// case-insensitively, so "/API/REPORTS" would dodge a path check).
	limit := func(cost int64) fiber.Handler {
		return fiberlimit.New(quota,
			guard.WithKey(keyfunc.AppKey()),
			guard.WithCost(func(keyfunc.Request) int64 { return cost }),
			guard.WithHeaders(guard.HeadersXRateLimit|guard.HeadersIETF),
			guard.WithBody(guard.BodyProblem),
		)
	}
	api := a.fiber.Group("/api", a.authenticate)
	api.Get("/items", limit(1), items)
	api.Post("/reports", limit(costReport), report)
	// An export runs long: at most 2 in flight per API key, each also
	// costing one unit of the key's quota. A request denied by either
	// limit consumes nothing of the other.
	api.Post("/exports", fiberlimit.New(exports,
		guard.WithKey(keyfunc.AppKey()),
		guard.WithAlso(quota, keyfunc.AppKey()),
		guard.WithHeaders(guard.HeadersXRateLimit|guard.HeadersIETF),
		guard.WithBody(guard.BodyProblem),
	), export(cfg.export))

	a.fiber.Get("/quota", a.authenticate, a.status)
	if cfg.adminToken != "" {
		a.fiber.Post("/admin/plan", a.setPlan(cfg.adminToken))
	}
	return a, nil
}

// apiKey returns the request's API key as keyfunc.AppKey finds it, copied
// out of fasthttp's reused buffers.
func apiKey(c *fiber.Ctx) string {
	k := c.Get("X-API-Key")
	if k == "" {
		k = c.Query("api_key")
	}
	return strings.Clone(k)
}

// authenticate refuses keys that have no plan.
func (a *app) authenticate(c *fiber.Ctx) error {
	_, ok, err := a.plans.plan(c.UserContext(), apiKey(c))
	switch {
	case err != nil:
		log.Print(err)
		return fiber.ErrServiceUnavailable
	case !ok:
		return c.Status(http.StatusUnauthorized).JSON(fiber.Map{"error": "unknown API key"})
	}
	return c.Next()
}

func items(c *fiber.Ctx) error {
	return c.JSON([]string{"apple", "pear", "plum"})
}

func report(c *fiber.Ctx) error {
	return c.JSON(fiber.Map{"report": "quarterly figures"})
}

// export answers an export once work is done.
func export(work func(ctx context.Context)) fiber.Handler {
	return func(c *fiber.Ctx) error {
		work(c.UserContext())
		c.Set("Content-Type", "text/csv")
		return c.SendString("item,count\napple,3\n")
	}
}

// quotaStatus is the answer of GET /quota.
type quotaStatus struct {
	Plan   string       `json:"plan"`
	Limits []limitState `json:"limits"`
}

// limitState is one rule of a key's plan as it stands.
type limitState struct {
	Limit         int64 `json:"limit"`
	WindowSeconds int64 `json:"window_seconds"`
	Used          int64 `json:"used"`
	Remaining     int64 `json:"remaining"`
	ResetSeconds  int64 `json:"reset_seconds"` // until the window is empty
}

// status answers the key's remaining quota without consuming any.
func (a *app) status(c *fiber.Ctx) error {
	key := apiKey(c)
	plan, _, err := a.plans.plan(c.UserContext(), key)
	if err != nil {
		log.Print(err)
		return fiber.ErrServiceUnavailable
	}
	d, err := a.quota.Peek(c.UserContext(), key)
	if err != nil {
		return fiber.ErrServiceUnavailable
	}
	st := quotaStatus{Plan: plan, Limits: make([]limitState, 0, len(d.Rules()))}
	for _, r := range d.Rules() {
		st.Limits = append(st.Limits, limitState{
			Limit:         r.Limit,
			WindowSeconds: guard.Seconds(r.Window),
			Used:          r.Used,
			Remaining:     r.Remaining(),
			ResetSeconds:  guard.Seconds(r.ResetAfter),
		})
	}
	return c.JSON(st)
}

// setPlan moves a key to another plan. InvalidateTier makes the move
// count at once, on every instance sharing the Redis: the key's next
// request resolves its plan again, and no denial cached under the old
// plan survives.
func (a *app) setPlan(token string) fiber.Handler {
	return func(c *fiber.Ctx) error {
		bearer, ok := strings.CutPrefix(c.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(bearer), []byte(token)) != 1 {
			return c.Status(http.StatusUnauthorized).JSON(fiber.Map{"error": "admin token required"})
		}
		var req struct {
			Key  string `json:"key"`
			Plan string `json:"plan"`
		}
		if err := c.BodyParser(&req); err != nil || req.Key == "" {
			return c.Status(http.StatusBadRequest).JSON(fiber.Map{"error": `want {"key": "...", "plan": "..."}`})
		}
		if _, ok := a.tiers[req.Plan]; !ok {
			return c.Status(http.StatusBadRequest).JSON(fiber.Map{"error": "unknown plan"})
		}
		key := strings.Clone(req.Key)
		if err := a.plans.set(c.UserContext(), key, req.Plan); err != nil {
			log.Print(err)
			return fiber.ErrServiceUnavailable
		}
		if err := a.quota.InvalidateTier(c.UserContext(), key); err != nil {
			// This instance has the new plan; others keep the old one
			// until their tier cache expires.
			log.Printf("quota: plan changed, but other instances may not know yet: %v", err)
		}
		return c.JSON(fiber.Map{"plan": req.Plan})
	}
}

// answerError answers errors returned by handlers with a fixed text: the
// status's own for a *fiber.Error, else 500. No error detail reaches the
// client.
func answerError(c *fiber.Ctx, err error) error {
	code := http.StatusInternalServerError
	var fe *fiber.Error
	if errors.As(err, &fe) {
		code = fe.Code
	} else {
		log.Printf("quota: %s %s: %v", c.Method(), c.Path(), err)
	}
	return c.Status(code).JSON(fiber.Map{"error": http.StatusText(code)})
}
