package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
)

// footprint is the Redis memory of one key as MEMORY USAGE reports it.
type footprint struct {
	what     string
	entries  int // live units (sliding log) or live buckets
	bytes    int64
	perEntry float64 // bytes / entries
}

// measureFootprint fills keys through ratekit's RedisStore and reads
// MEMORY USAGE ... SAMPLES 0 (exact) for each.
func measureFootprint(ctx context.Context, rdb *redis.Client) ([]footprint, error) {
	var out []footprint
	store := core.NewRedisStore(rdb)
	// Sliding log: n requests of one unit each, admitted within one hour.
	for _, n := range []int{100, 1000, 10000} {
		pol := core.Policy{Name: "fp-log", Rules: []core.Rule{{Limit: 1 << 20, Window: time.Hour}}}
		l, err := core.NewLimiter(store, pol, core.WithTimeout(5*time.Second))
		if err != nil {
			return nil, err
		}
		key := fmt.Sprintf("log-%d", n)
		if err := fill(ctx, n, func() error {
			d, err := l.Allow(ctx, key)
			if err == nil && (!d.Allowed || d.Source != core.SourceStore) {
				err = fmt.Errorf("footprint: request not admitted by the store: %+v", d)
			}
			return err
		}); err != nil {
			return nil, err
		}
		b, err := rdb.MemoryUsage(ctx, store.Key(pol.Name, key), 0).Result()
		if err != nil {
			return nil, fmt.Errorf("MEMORY USAGE: %w", err)
		}
		enc, _ := rdb.ObjectEncoding(ctx, store.Key(pol.Name, key)).Result()
		out = append(out, footprint{what: fmt.Sprintf("SlidingLog, %d live entries (%s)", n, enc), entries: n, bytes: b, perEntry: float64(b) / float64(n)})
	}
	// Sliding buckets: one request per bucket width over a whole window,
	// so that every bucket is live; time is stepped on the client side.
	for _, c := range []struct {
		limit   int64
		buckets int
	}{{100000, 0}, {1000000000, 0}, {100000, core.MaxBuckets}} {
		var mu sync.Mutex
		now := time.Now()
		clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		bstore := core.NewRedisStore(rdb)
		pol := core.Policy{Name: "fp-buckets", Rules: []core.Rule{{Limit: c.limit, Window: 24 * time.Hour}}, Algorithm: core.SlidingBuckets, Buckets: c.buckets}
		l, err := core.NewLimiter(bstore, pol, core.WithTimeout(5*time.Second), core.WithClock(clock))
		if err != nil {
			return nil, err
		}
		b := c.buckets
		if b == 0 {
			b = 60 // the default
		}
		key := fmt.Sprintf("b-%d-%d", c.limit, b)
		step := 24 * time.Hour / time.Duration(b)
		for range b {
			if _, err := l.AllowN(ctx, key, 3); err != nil {
				return nil, err
			}
			mu.Lock()
			now = now.Add(step)
			mu.Unlock()
		}
		rk := bstore.Key(pol.Name, key) + ":b"
		bytes, err := rdb.MemoryUsage(ctx, rk, 0).Result()
		if err != nil {
			return nil, fmt.Errorf("MEMORY USAGE: %w", err)
		}
		enc, _ := rdb.ObjectEncoding(ctx, rk).Result()
		out = append(out, footprint{what: fmt.Sprintf("SlidingBuckets, %d/day, %d buckets (%s)", c.limit, b, enc), entries: b, bytes: bytes, perEntry: float64(bytes) / float64(b)})
	}
	return out, rdb.FlushAll(ctx).Err()
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
