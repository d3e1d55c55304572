package rueidisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/rueidis"

	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/internal/redislib"
)

// AddRefused implements [driver.Refusals], under redisstore's names: the
// refusals of a policy in a minute by the server's clock are a sorted
// set, <prefix>:<policy>:refused:{<policy>}:<minute> (a hash tag per
// policy, so one slot holds a policy's minutes), holding the 1,000 keys
// with the highest counts; it expires 7 minutes after its last addition.
// Instances on either driver count together.
func (s *Store) AddRefused(ctx context.Context, policy string, refused []driver.RefusedKey) error {
	if len(refused) == 0 {
		return nil
	}
	_, err := redislib.Bounded(ctx, func(ctx context.Context) (struct{}, error) {
		now, err := s.serverTime(ctx)
		if err != nil {
			return struct{}{}, err
		}
		b := s.client.B()
		k := redislib.RefusedKey(s.prefix, policy, redislib.RefusedMinute(now))
		cmds := make(rueidis.Commands, 0, len(refused)+4)
		cmds = append(cmds, b.Multi().Build())
		for _, r := range refused {
			if r.Refusals > 0 {
				cmds = append(cmds, b.Zincrby().Key(k).Increment(float64(r.Refusals)).Member(r.Key).Build())
			}
		}
		cmds = append(cmds,
			b.Zremrangebyrank().Key(k).Start(0).Stop(-redislib.RefusedKeep-1).Build(),
			b.Pexpire().Key(k).Milliseconds(redislib.RefusedTTL.Milliseconds()).Build(),
			b.Exec().Build())
		rs := s.client.DoMulti(ctx, cmds...)
		_, err = rs[len(rs)-1].ToArray()
		return struct{}{}, err
	})
	if errors.Is(err, rueidis.ErrClosing) || err != nil && s.isClosed() {
		return fmt.Errorf("rueidisstore: add refused of policy %q: %w: %w", policy, driver.ErrClosed, err)
	}
	if err != nil {
		return fmt.Errorf("rueidisstore: add refused of policy %q: %w", policy, err)
	}
	return nil
}

// TopRefused implements [driver.Refusals]: it sums the sets of the current
// minute by the server's clock and of the five before it (see
// [Store.AddRefused]), read in one round trip.
func (s *Store) TopRefused(ctx context.Context, policy string, n int) ([]driver.RefusedKey, error) {
	if n < 1 {
		return nil, nil
	}
	top, err := redislib.Bounded(ctx, func(ctx context.Context) ([]driver.RefusedKey, error) {
		now, err := s.serverTime(ctx)
		if err != nil {
			return nil, err
		}
		b := s.client.B()
		keys := redislib.RefusedKeys(s.prefix, policy, redislib.RefusedMinute(now))
		cmds := make(rueidis.Commands, len(keys))
		for i, k := range keys {
			cmds[i] = b.Zrange().Key(k).Min("0").Max("-1").Withscores().Build()
		}
		sum := redislib.RefusedSum{}
		for _, r := range s.client.DoMulti(ctx, cmds...) {
			zs, err := r.AsZScores()
			if err != nil {
				return nil, err
			}
			for _, z := range zs {
				sum.Add(z.Member, z.Score)
			}
		}
		return sum.Top(n), nil
	})
	if err != nil {
		return nil, fmt.Errorf("rueidisstore: top refused of policy %q: %w", policy, err)
	}
	return top, nil
}

// serverTime returns the Redis server's clock.
func (s *Store) serverTime(ctx context.Context) (time.Time, error) {
	now, err := s.client.Do(ctx, s.client.B().Time().Build()).AsIntSlice()
	if err != nil {
		return time.Time{}, fmt.Errorf("TIME: %w", err)
	}
	if len(now) != 2 {
		return time.Time{}, fmt.Errorf("TIME answered %v", now)
	}
	return time.Unix(now[0], now[1]*1000), nil
}
