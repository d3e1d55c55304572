package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-limiter/memorystore"
	ulule "github.com/ulule/limiter/v3"
	ulmemory "github.com/ulule/limiter/v3/drivers/store/memory"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"
	"golang.org/x/time/rate"

	"github.com/ratekit/ratekit/core"
)

// pattern is a key pattern with the limit every library is given for it.
type pattern struct {
	name   string
	title  string
	keys   []string
	limit  int64
	window time.Duration
}

// huge is the limit of the mostly-allowed patterns: never reached.
const huge = 1 << 40

func patterns() []*pattern {
	many := make([]string, 10000)
	for i := range many {
		many[i] = fmt.Sprintf("user-%d", i)
	}
	return []*pattern{
		{name: "hot", title: "one hot key, mostly allowed (limit 2^40/s)", keys: []string{"hot"}, limit: huge, window: time.Second},
		{name: "10k", title: "10,000 keys, mostly allowed (limit 2^40/s each)", keys: many, limit: huge, window: time.Second},
		{name: "denied", title: "one hot key, mostly denied (10/min: a denied flood)", keys: []string{"flood"}, limit: 10, window: time.Minute},
	}
}

// env is what the libraries share in one run.
type env struct {
	rdb *redis.Client // nil: no Redis-backed libraries
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

func libraries() []*library {
	return []*library{
		{name: "ratekit", store: "redis", algo: "sliding log (Lua, ZSET)", ratekit: true, setup: setupRatekitRedis},
		{name: "go-redis/redis_rate", store: "redis", algo: "GCRA (Lua)", setup: setupRedisRate},
		{name: "ulule/limiter", store: "redis", algo: "fixed window (Lua INCR)", setup: setupUluleRedis},
		{name: "ratekit", store: "memory", algo: "sliding log", ratekit: true, setup: setupRatekitMemory},
		{name: "x/time/rate", store: "memory", algo: "token bucket (map of limiters)", setup: setupXTimeRate},
		{name: "sethvargo/go-limiter", store: "memory", algo: "token bucket", setup: setupSethvargo},
		{name: "ulule/limiter", store: "memory", algo: "fixed window", setup: setupUluleMemory},
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

func ratekitPolicy(p *pattern) core.Policy {
	return core.Policy{Name: "bench-" + p.name, Rules: []core.Rule{{Limit: p.limit, Window: p.window}}}
}

func setupRatekitRedis(e *env, p *pattern) (allowFunc, func(), error) {
	// A store timeout of 1 s instead of the default 20 ms: on a loaded
	// two-core machine a 64-goroutine run can exceed 20 ms at the tail, and
	// a fallback decision would not measure Redis. Fallbacks are counted
	// as errors anyway.
	l, err := core.NewLimiter(core.NewRedisStore(e.rdb), ratekitPolicy(p), core.WithTimeout(time.Second))
	if err != nil {
		return nil, nil, err
	}
	return ratekitAllow(l), func() {}, nil
}

func setupRatekitMemory(_ *env, p *pattern) (allowFunc, func(), error) {
	l, err := core.NewLimiter(core.NewMemoryStore(), ratekitPolicy(p))
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

func ululeAllow(store ulule.Store, p *pattern) allowFunc {
	l := ulule.New(store, ulule.Rate{Period: p.window, Limit: p.limit})
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
	return ululeAllow(store, p), func() {}, nil
}

func setupUluleMemory(_ *env, p *pattern) (allowFunc, func(), error) {
	return ululeAllow(ulmemory.NewStore(), p), func() {}, nil
}

func setupSethvargo(_ *env, p *pattern) (allowFunc, func(), error) {
	store, err := memorystore.New(&memorystore.Config{Tokens: uint64(p.limit), Interval: p.window})
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
	every := rate.Limit(float64(p.limit) / p.window.Seconds())
	burst := int(p.limit)
	return func(_ context.Context, key string) (bool, error) {
		v, ok := m.Load(key)
		if !ok {
			v, _ = m.LoadOrStore(key, rate.NewLimiter(every, burst))
		}
		return v.(*rate.Limiter).Allow(), nil
	}, func() {}, nil
}
