package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
)

// footprint is the Redis memory of one limited key as MEMORY USAGE
// reports it, summed over the Redis keys it uses.
type footprint struct {
	lib      string // library name
	kind     string // fpLog, fpBuckets or fpPeer
	what     string
	limit    int64
	entries  int // live admissions (sliding log), buckets, or 0 (a peer's key)
	keys     int // Redis keys the limited key uses
	bytes    int64
	perEntry float64 // bytes / entries; 0 when entries is 0
	defaults bool    // SlidingBuckets with the default bucket count
}

// Kinds of footprint.
const (
	fpLog     = "log"
	fpBuckets = "buckets"
	fpPeer    = "peer"
)

// footprintLimits are the SlidingLog limits whose keys are filled; a
// quick run leaves out the last, which takes seconds to fill.
var footprintLimits = []int64{10, 100, 1000, 10000, 100000}

// measureFootprint fills keys through ratekit's RedisStore and the peers
// and reads MEMORY USAGE ... SAMPLES 0 (exact) of every key each left.
func measureFootprint(ctx context.Context, e *env, quick bool) ([]footprint, error) {
	var out []footprint
	rdb := e.rdb
	store := e.ratekitStore()
	limits := footprintLimits
	if quick {
		limits = limits[:len(limits)-1]
	}
	// Sliding log: limit requests of one unit each, admitted within one
	// hour, from 16 goroutines: the log grows as it does in service.
	for _, limit := range limits {
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			return out, err
		}
		pol := core.Policy{Name: "fp-log", Rules: []core.Rule{{Limit: limit, Window: time.Hour}}}
		l, err := core.NewLimiter(store, pol, core.WithTimeout(5*time.Second))
		if err != nil {
			return out, err
		}
		if err := fill(ctx, int(limit), func() error {
			d, err := l.Allow(ctx, "k")
			if err == nil && (!d.Allowed || d.Source != core.SourceStore) {
				err = fmt.Errorf("footprint: request not admitted by the store: %+v", d)
			}
			return err
		}); err != nil {
			return out, err
		}
		keys, b, err := keyBytes(ctx, rdb)
		if err != nil {
			return out, err
		}
		out = append(out, footprint{lib: nameRatekit, kind: fpLog, what: fmt.Sprintf("ratekit SlidingLog, limit %d/h, full", limit),
			limit: limit, entries: int(limit), keys: keys, bytes: b, perEntry: float64(b) / float64(limit)})
	}
	// Sliding buckets: one request per bucket width over a whole window,
	// so that every bucket is live; time is stepped on the client side.
	for _, c := range []struct {
		limit   int64
		buckets int
	}{{100000, 0}, {1000000000, 0}, {100000, 1000}} {
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			return out, err
		}
		var mu sync.Mutex
		now := time.Now()
		clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		pol := core.Policy{Name: "fp-buckets", Rules: []core.Rule{{Limit: c.limit, Window: 24 * time.Hour}}, Algorithm: core.SlidingBuckets, Buckets: c.buckets}
		l, err := core.NewLimiter(store, pol, core.WithTimeout(5*time.Second), core.WithClock(clock))
		if err != nil {
			return out, err
		}
		b := c.buckets
		if b == 0 {
			b = 60 // the default
		}
		step := 24 * time.Hour / time.Duration(b)
		for range b {
			if _, err := l.AllowN(ctx, "k", 3); err != nil {
				return out, err
			}
			mu.Lock()
			now = now.Add(step)
			mu.Unlock()
		}
		keys, bytes, err := keyBytes(ctx, rdb)
		if err != nil {
			return out, err
		}
		out = append(out, footprint{lib: nameRatekit, kind: fpBuckets, what: fmt.Sprintf("ratekit SlidingBuckets, %d/day, %d buckets, all live", c.limit, b),
			limit: c.limit, entries: b, keys: keys, bytes: bytes, perEntry: float64(bytes) / float64(b), defaults: c.buckets == 0})
	}
	// The peers: one key each after 100 requests under 100 per hour.
	p := &pattern{name: "fp", keys: []string{"k"}, limit: 100, window: time.Hour}
	for _, lib := range libraries() {
		if lib.store != "redis" || lib.ratekit || lib.name == nameRueidis {
			continue
		}
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			return out, err
		}
		allow, closeFn, err := lib.setup(e, p)
		if err != nil {
			return out, err
		}
		for range p.limit {
			if _, err := allow(ctx, "k"); err != nil {
				closeFn()
				return out, fmt.Errorf("footprint %s: %w", lib.name, err)
			}
		}
		closeFn()
		keys, b, err := keyBytes(ctx, rdb)
		if err != nil {
			return out, err
		}
		out = append(out, footprint{lib: lib.name, kind: fpPeer, what: fmt.Sprintf("%s (%s), 100/h, 100 requests", lib.name, lib.algo),
			limit: p.limit, keys: keys, bytes: b})
	}
	return out, rdb.FlushAll(ctx).Err()
}

// keyBytes returns the number of keys in the database and the sum of
// their MEMORY USAGE ... SAMPLES 0.
func keyBytes(ctx context.Context, rdb *redis.Client) (keys int, bytes int64, err error) {
	iter := rdb.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		b, err := rdb.MemoryUsage(ctx, iter.Val(), 0).Result()
		if err != nil {
			return 0, 0, fmt.Errorf("MEMORY USAGE: %w", err)
		}
		keys++
		bytes += b
	}
	if err := iter.Err(); err != nil {
		return 0, 0, fmt.Errorf("SCAN: %w", err)
	}
	return keys, bytes, nil
}

// fill calls f n times from 16 goroutines and returns the first error.
func fill(ctx context.Context, n int, f func() error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		next  = make(chan struct{}, n)
	)
	for range n {
		next <- struct{}{}
	}
	close(next)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				if ctx.Err() != nil {
					return
				}
				if err := f(); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}
