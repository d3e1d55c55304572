package rueidisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/rueidis"

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
		return fmt.Errorf("rueidisstore: %w", err)
	}
	gk, base := redislib.GrantKey(s.prefix, policy, key), redislib.Key(s.prefix, policy, key)
	if !g.Until.IsZero() {
		if err := s.grantsRead(ctx, policy); err != nil {
			return err
		}
	}
	b := s.client.B()
	var cmds rueidis.Commands
	if g.Until.IsZero() {
		cmds = rueidis.Commands{b.Del().Key(gk).Build()}
	} else {
		cmds = rueidis.Commands{b.Multi().Build(), b.Set().Key(gk).Value(redislib.GrantValue(g)).Build(),
			b.Pexpireat().Key(gk).MillisecondsTimestamp(g.Until.UnixMilli()).Build(), b.Exec().Build()}
	}
	_, err := redislib.Bounded(ctx, func(ctx context.Context) (struct{}, error) {
		for _, r := range s.client.DoMulti(ctx, cmds...) {
			if err := r.Error(); err != nil {
				return struct{}{}, err
			}
		}
		// Every instance forgets its cached denials of the key.
		return struct{}{}, s.client.Do(ctx, b.Publish().Channel(s.channel).Message(base).Build()).Error()
	})
	if err != nil {
		return fmt.Errorf("rueidisstore: grant: %w", err)
	}
	return nil
}

// grantsRead returns an error unless every live instance of policy reads
// grants, as their announcements say.
func (s *Store) grantsRead(ctx context.Context, policy string) error {
	b := s.client.B()
	members, err := redislib.Bounded(ctx, func(ctx context.Context) ([]string, error) {
		now, err := s.client.Do(ctx, b.Time().Build()).AsIntSlice()
		if err != nil {
			return nil, err
		}
		if len(now) != 2 {
			return nil, fmt.Errorf("TIME answered %v", now)
		}
		ms := now[0]*1000 + now[1]/1000
		return s.client.Do(ctx, b.Zrangebyscore().Key(redislib.FleetKey(s.prefix, policy)).
			Min("("+strconv.FormatInt(ms, 10)).Max("+inf").Build()).AsStrSlice()
	})
	if err != nil {
		return fmt.Errorf("rueidisstore: grant: read the fleet: %w", err)
	}
	if err := redislib.GrantsRead(policy, members); err != nil {
		return fmt.Errorf("rueidisstore: grant: %w", err)
	}
	return nil
}

// GrantOf implements [driver.Grants].
func (s *Store) GrantOf(ctx context.Context, policy, key string) (driver.Grant, bool, error) {
	b := s.client.B()
	v, err := redislib.Bounded(ctx, func(ctx context.Context) (string, error) {
		return s.client.Do(ctx, b.Get().Key(redislib.GrantKey(s.prefix, policy, key)).Build()).ToString()
	})
	if rueidis.IsRedisNil(err) {
		return driver.Grant{}, false, nil
	}
	if err != nil {
		return driver.Grant{}, false, fmt.Errorf("rueidisstore: grant: %w", err)
	}
	g, err := redislib.ParseGrant(v)
	if err != nil {
		return driver.Grant{}, false, fmt.Errorf("rueidisstore: %w", err)
	}
	return g, true, nil
}
