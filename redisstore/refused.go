package redisstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/internal/redislib"
)

// AddRefused implements [driver.Refusals]: the refusals of a policy in a
// minute by the server's clock are a sorted set,
// <prefix>:<policy>:refused:{<policy>}:<minute> (a hash tag per policy,
// so one slot holds a policy's minutes), holding the 1,000 keys with the
// highest counts; it expires 7 minutes after its last addition.
func (s *Store) AddRefused(ctx context.Context, policy string, refused []driver.RefusedKey) error {
	if len(refused) == 0 {
		return nil
	}
	_, err := redislib.Bounded(ctx, func(ctx context.Context) (struct{}, error) {
		now, err := s.client.Time(ctx).Result()
		if err != nil {
			return struct{}{}, fmt.Errorf("TIME: %w", err)
		}
		k := redislib.RefusedKey(s.prefix, policy, redislib.RefusedMinute(now))
		_, err = s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
			for _, r := range refused {
				if r.Refusals > 0 {
					p.ZIncrBy(ctx, k, float64(r.Refusals), r.Key)
				}
			}
			p.ZRemRangeByRank(ctx, k, 0, -redislib.RefusedKeep-1)
			p.PExpire(ctx, k, redislib.RefusedTTL)
			return nil
		})
		return struct{}{}, err
	})
	if errors.Is(err, redis.ErrClosed) {
		return fmt.Errorf("redisstore: add refused of policy %q: %w: %w", policy, driver.ErrClosed, err)
	}
	if err != nil {
		return fmt.Errorf("redisstore: add refused of policy %q: %w", policy, err)
	}
	return nil
}

// TopRefused implements [driver.Refusals]: it sums the sets of the current
// minute by the server's clock and of the five before it (see
// [Store.AddRefused]), read in one pipeline.
func (s *Store) TopRefused(ctx context.Context, policy string, n int) ([]driver.RefusedKey, error) {
	if n < 1 {
		return nil, nil
	}
	top, err := redislib.Bounded(ctx, func(ctx context.Context) ([]driver.RefusedKey, error) {
		now, err := s.client.Time(ctx).Result()
		if err != nil {
			return nil, fmt.Errorf("TIME: %w", err)
		}
		keys := redislib.RefusedKeys(s.prefix, policy, redislib.RefusedMinute(now))
		cmds := make([]*redis.ZSliceCmd, len(keys))
		if _, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, k := range keys {
				cmds[i] = p.ZRangeWithScores(ctx, k, 0, -1)
			}
			return nil
		}); err != nil {
			return nil, err
		}
		sum := redislib.RefusedSum{}
		for _, c := range cmds {
			for _, z := range c.Val() {
				if m, ok := z.Member.(string); ok {
					sum.Add(m, z.Score)
				}
			}
		}
		return sum.Top(n), nil
	})
	if err != nil {
		return nil, fmt.Errorf("redisstore: top refused of policy %q: %w", policy, err)
	}
	return top, nil
}
