package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-limiter/memorystore"
	ulule "github.com/ulule/limiter/v3"
	ulmemory "github.com/ulule/limiter/v3/drivers/store/memory"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"
	"golang.org/x/time/rate"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/ratekit/ratekit/rueidisstore"
	"github.com/redis/rueidis"
)

// pattern is a key pattern with the limit every library is given for it.
// A library on Redis runs the limit over window, one in memory over
// memWindow: in-memory decisions are about a hundred times faster, and
// the mostly-allowed patterns must stay allowed for every library.
type pattern struct {
	name      string
	title     string
	keys      []string
	limit     int64
	window    time.Duration // Redis-backed libraries
	memWindow time.Duration // in-memory libraries
	allowed   bool          // the limit is never reached: the allowed path
}

// windowOf returns the window of p for a library of store.
func (p *pattern) windowOf(store string) time.Duration {
	if store == "memory" {
		return p.memWindow
	}
	return p.window
}

// roomy is the limit of the allowed patterns: the largest a SlidingLog
// takes, never reached at this machine's rates. On one hot key the window
// is 100 ms on Redis (1M/s) and 1 ms in memory (100M/s). Over 10,000
// keys each key sees a ten-thousandth of the load and its window is long
// enough that every key, touched once before the measurement, stays live
// through it, as an active user's would, rather than expire and start
// again: 10 s on Redis (tens of thousands of decisions a second, a few
// per key: tens of live entries per key) and 100 ms in memory, where a
// hundred times the rate would otherwise fill each key's log with
// thousands of live entries, a gigabyte over 10,000 keys, and measure
// the allocator and the page faults of that growth rather than a
// decision (issue 21: "at rates that keep each key's live log
// realistic"). Both hold tens of live entries per key.
const (
	roomy          = 100_000
	roomyWindow    = 100 * time.Millisecond
	roomyMemWindow = time.Millisecond
	manyWindow     = 10 * time.Second
	manyMemWindow  = 100 * time.Millisecond
)

func patterns() []*pattern {
	many := make([]string, 10000)
	for i := range many {
		many[i] = fmt.Sprintf("user-%d", i)
	}
	return []*pattern{
		{name: "hot", title: "one hot key, allowed (100,000 per 100 ms on Redis, per 1 ms in memory)", keys: []string{"hot"},
			limit: roomy, window: roomyWindow, memWindow: roomyMemWindow, allowed: true},
		{name: "10k", title: "10,000 keys, allowed (100,000 per 10 s each on Redis, per 100 ms in memory; every key touched once before the measurement)", keys: many,
			limit: roomy, window: manyWindow, memWindow: manyMemWindow, allowed: true},
		{name: "denied", title: "one hot key, denied (10/min: a denied flood)", keys: []string{"flood"},
			limit: 10, window: time.Minute, memWindow: time.Minute},
	}
}

// touchAll decides once for every key of keys from 16 goroutines, so that
// a measurement that follows finds every key live; it returns the first
// error.
func touchAll(ctx context.Context, allow allowFunc, keys []string) error {
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= int64(len(keys)) {
					return
				}
				if _, err := allow(ctx, keys[i]); err != nil && !errors.Is(err, errFallback) {
					mu.Lock()
					first = cmp.Or(first, err)
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return cmp.Or(first, ctx.Err())
}

// env is what the libraries share in one run.
type env struct {
	rdb *redis.Client // nil: no Redis-backed libraries
	// rk is ratekit's RedisStore, one for the run as an application has
	// one: its batcher and its deny-cache subscription are built once.
	rk *redisstore.Store
	// rq is ratekit's store on rueidis, the second driver, measured beside
	// the go-redis one, with its own client to the same server.
	rq  *rueidisstore.Store
	rqc rueidis.Client
}

// close releases what the run's stores hold.
func (e *env) close() {
	if e.rq != nil {
		e.rq.Close()
		e.rqc.Close()
	}
}

// ratekitRueidisStore returns the run's rueidisstore.Store.
func (e *env) ratekitRueidisStore() (*rueidisstore.Store, error) {
	if e.rq == nil {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{e.rdb.Options().Addr}, DisableCache: true})
		if err != nil {
			return nil, fmt.Errorf("rueidis client: %w", err)
		}
		e.rq, e.rqc = rueidisstore.New(c), c
	}
	return e.rq, nil
}

// ratekitStore returns the run's RedisStore.
func (e *env) ratekitStore() *redisstore.Store {
	if e.rk == nil {
		e.rk = redisstore.New(e.rdb)
	}
	return e.rk
}

// library is one contender: how to build its allow function for a pattern.
// The returned close function releases what setup built.
type library struct {
	name    string // as printed
	store   string // "redis" or "memory"
	algo    string // the algorithm it runs
	ratekit bool   // the reference for the ×ratekit ratios of its store
	setup   func(e *env, p *pattern) (allowFunc, func(), error)
}

// errFallback marks a ratekit decision made by the failure policy instead
// of the store: the harness counts it as an error, since it did not
// measure the store.
var errFallback = errors.New("fallback decision")

// Library names, as the goals look them up.
const (
	nameRatekit = "ratekit"
	// nameRueidis is ratekit on its second driver: not a peer, and not
	// the reference of the goals, which the go-redis store is.
	nameRueidis   = "ratekit/rueidisstore"
	nameRedisRate = "go-redis/redis_rate"
	nameUlule     = "ulule/limiter"
	nameXRate     = "x/time/rate"
	nameSethvargo = "sethvargo/go-limiter"
)

func libraries() []*library {
	return []*library{
		{name: nameRatekit, store: "redis", algo: "sliding log (Redis Function, packed string, batched)", ratekit: true, setup: setupRatekitRedis},
		{name: nameRueidis, store: "redis", algo: "sliding log, as above, on rueidis", setup: setupRatekitRueidis},
		{name: nameRedisRate, store: "redis", algo: "GCRA (Lua, EVALSHA)", setup: setupRedisRate},
		{name: nameUlule, store: "redis", algo: "fixed window (Lua INCR, EVALSHA)", setup: setupUluleRedis},
		{name: nameRatekit, store: "memory", algo: "sliding log", ratekit: true, setup: setupRatekitMemory},
		{name: nameXRate, store: "memory", algo: "token bucket (map of limiters)", setup: setupXTimeRate},
		{name: nameSethvargo, store: "memory", algo: "token bucket", setup: setupSethvargo},
		{name: nameUlule, store: "memory", algo: "fixed window", setup: setupUluleMemory},
	}
}

func ratekitAllow(l *core.Limiter) allowFunc {
	return func(ctx context.Context, key string) (bool, error) {
		d, err := l.Allow(ctx, key)
		if err != nil {
			return false, err
		}
		if d.Source.Fallback() {
			return d.Allowed, errFallback
		}
		return d.Allowed, nil
	}
}

func ratekitPolicy(p *pattern, store string) core.Policy {
	return core.Policy{Name: "bench-" + p.name, Rules: []core.Rule{{Limit: p.limit, Window: p.windowOf(store)}}}
}

func setupRatekitRedis(e *env, p *pattern) (allowFunc, func(), error) {
	// The default limiter but for the store timeout: 1 s instead of 20 ms,
	// since on a loaded two-core machine a 64-goroutine run can exceed
	// 20 ms at the tail, and a fallback decision would not measure Redis.
	// Fallbacks are counted as errors anyway.
	l, err := core.NewLimiter(e.ratekitStore(), ratekitPolicy(p, "redis"), core.WithTimeout(time.Second))
	if err != nil {
		return nil, nil, err
	}
	return ratekitAllow(l), func() {}, nil
}

func setupRatekitRueidis(e *env, p *pattern) (allowFunc, func(), error) {
	store, err := e.ratekitRueidisStore()
	if err != nil {
		return nil, nil, err
	}
	// As setupRatekitRedis.
	l, err := core.NewLimiter(store, ratekitPolicy(p, "redis"), core.WithTimeout(time.Second))
	if err != nil {
		return nil, nil, err
	}
	return ratekitAllow(l), func() {}, nil
}

func setupRatekitMemory(_ *env, p *pattern) (allowFunc, func(), error) {
	l, err := core.NewLimiter(core.NewMemoryStore(), ratekitPolicy(p, "memory"))
	if err != nil {
		return nil, nil, err
	}
	return ratekitAllow(l), func() {}, nil
}

func setupRedisRate(e *env, p *pattern) (allowFunc, func(), error) {
	l := redis_rate.NewLimiter(e.rdb)
	lim := redis_rate.Limit{Rate: int(p.limit), Burst: int(p.limit), Period: p.window}
	return func(ctx context.Context, key string) (bool, error) {
		res, err := l.Allow(ctx, key, lim)
		if err != nil {
			return false, err
		}
		return res.Allowed > 0, nil
	}, func() {}, nil
}

func ululeAllow(store ulule.Store, limit int64, window time.Duration) allowFunc {
	l := ulule.New(store, ulule.Rate{Period: window, Limit: limit})
	return func(ctx context.Context, key string) (bool, error) {
		c, err := l.Get(ctx, key)
		if err != nil {
			return false, err
		}
		return !c.Reached, nil
	}
}

func setupUluleRedis(e *env, p *pattern) (allowFunc, func(), error) {
	store, err := ulredis.NewStoreWithOptions(e.rdb, ulule.StoreOptions{Prefix: "ulule"})
	if err != nil {
		return nil, nil, err
	}
	return ululeAllow(store, p.limit, p.window), func() {}, nil
}

func setupUluleMemory(_ *env, p *pattern) (allowFunc, func(), error) {
	return ululeAllow(ulmemory.NewStore(), p.limit, p.memWindow), func() {}, nil
}

func setupSethvargo(_ *env, p *pattern) (allowFunc, func(), error) {
	store, err := memorystore.New(&memorystore.Config{Tokens: uint64(p.limit), Interval: p.memWindow})
	if err != nil {
		return nil, nil, err
	}
	return func(ctx context.Context, key string) (bool, error) {
		_, _, _, ok, err := store.Take(ctx, key)
		return ok, err
	}, func() { _ = store.Close(context.Background()) }, nil
}

// setupXTimeRate keys x/time/rate the usual way: one *rate.Limiter per
// key in a sync.Map, created on first use.
func setupXTimeRate(_ *env, p *pattern) (allowFunc, func(), error) {
	var m sync.Map
	every := rate.Limit(float64(p.limit) / p.memWindow.Seconds())
	burst := int(p.limit)
	return func(_ context.Context, key string) (bool, error) {
		v, ok := m.Load(key)
		if !ok {
			v, _ = m.LoadOrStore(key, rate.NewLimiter(every, burst))
		}
		return v.(*rate.Limiter).Allow(), nil
	}, func() {}, nil
}
