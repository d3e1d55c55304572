package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/internal/redislib"
)

// SetGrant implements [driver.Grants]: the grant is a key beside the
// key's windows, in their Cluster slot, that expires at the grant's end
// (PEXPIREAT), read by every decision of the key in the same script. It
// refuses a grant while an instance of a release that reads no grants
// (v0.1.0) uses the policy: that instance would decide by the rules
// alone. A revocation is never refused.
func (s *Store) SetGrant(ctx context.Context, policy, key string, g driver.Grant) error {
	if err := redislib.CheckGrant(g); err != nil {
		return fmt.Errorf("redisstore: %w", err)
	}
	gk, base := redislib.GrantKey(s.prefix, policy, key), redislib.Key(s.prefix, policy, key)
	if !g.Until.IsZero() {
		if err := s.grantsRead(ctx, policy); err != nil {
			return err
		}
	}
	_, err := redislib.Bounded(ctx, func(ctx context.Context) (struct{}, error) {
		_, err := s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
			if g.Until.IsZero() {
				p.Del(ctx, gk)
			} else {
				p.Set(ctx, gk, redislib.GrantValue(g), 0)
				p.PExpireAt(ctx, gk, g.Until)
			}
			return nil
		})
		if err != nil {
			return struct{}{}, err
		}
		// Every instance forgets its cached denials of the key.
		return struct{}{}, s.client.Publish(ctx, s.watch.channel, base).Err()
	})
	if err != nil {
		return fmt.Errorf("redisstore: grant: %w", err)
	}
	return nil
}

// grantsRead returns an error unless every live instance of policy reads
// grants, as their announcements say.
func (s *Store) grantsRead(ctx context.Context, policy string) error {
	members, err := redislib.Bounded(ctx, func(ctx context.Context) ([]string, error) {
		now, err := s.client.Time(ctx).Result()
		if err != nil {
			return nil, err
		}
		return s.client.ZRangeByScore(ctx, redislib.FleetKey(s.prefix, policy),
			&redis.ZRangeBy{Min: "(" + strconv.FormatInt(now.UnixMilli(), 10), Max: "+inf"}).Result()
	})
	if err != nil {
		return fmt.Errorf("redisstore: grant: read the fleet: %w", err)
	}
	if err := redislib.GrantsRead(policy, members); err != nil {
		return fmt.Errorf("redisstore: grant: %w", err)
	}
	return nil
}

// GrantOf implements [driver.Grants].
func (s *Store) GrantOf(ctx context.Context, policy, key string) (driver.Grant, bool, error) {
	v, err := redislib.Bounded(ctx, func(ctx context.Context) (string, error) {
		return s.client.Get(ctx, redislib.GrantKey(s.prefix, policy, key)).Result()
	})
	if errors.Is(err, redis.Nil) {
		return driver.Grant{}, false, nil
	}
	if err != nil {
		return driver.Grant{}, false, fmt.Errorf("redisstore: grant: %w", err)
	}
	g, err := redislib.ParseGrant(v)
	if err != nil {
		return driver.Grant{}, false, fmt.Errorf("redisstore: %w", err)
	}
	return g, true, nil
}
