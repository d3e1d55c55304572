package rueidisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/internal/redislib"
)

// Invalidations travel on the store's pub/sub channel,
// <prefix>:invalidate, as they do for redisstore: a refund or reset
// publishes the Redis key, a tier invalidation the key's name with
// ":tier" appended. One goroutine of the store listens, with rueidis's
// Receive on the client's shared connection; rueidis subscribes again
// after a reconnection, and every confirmed subscription tells every
// watcher to resync, since messages sent while it was down are lost.

// Watch implements [driver.Invalidator]: f hears every reset and refund of
// policy's keys and every tier invalidation, from any instance on this
// Redis and prefix (on either driver), and a Resync at every
// (re)subscription.
func (s *Store) Watch(policy string, f func(driver.Invalidation)) {
	s.watchers.Add(policy, f)
	s.listen.Do(func() { s.start(s.receive) })
}

// Invalidate implements [driver.Invalidator]: it publishes the tier
// invalidation of policy's bounded key.
func (s *Store) Invalidate(ctx context.Context, policy, key string) error {
	msg := redislib.Key(s.prefix, policy, key) + redislib.TierSuffix
	_, err := redislib.Bounded(ctx, func(ctx context.Context) (int64, error) {
		return s.client.Do(ctx, s.client.B().Publish().Channel(s.channel).Message(msg).Build()).AsInt64()
	})
	if err != nil {
		return fmt.Errorf("rueidisstore: invalidate: %w", err)
	}
	return nil
}

// receive listens on the channel until the store or the client is closed.
func (s *Store) receive() {
	ctx := rueidis.WithOnSubscriptionHook(s.life, func(sub rueidis.PubSubSubscription) {
		// Called by rueidis at each confirmation, before the messages
		// that follow it.
		if sub.Kind == "subscribe" {
			s.watchers.Subscribed()
		}
	})
	const first = 10 * time.Millisecond
	backoff := first
	for {
		heard := false
		err := s.client.Receive(ctx, s.client.B().Subscribe().Channel(s.channel).Build(), func(m rueidis.PubSubMessage) {
			heard = true
			s.watchers.Message(m.Message)
		})
		s.watchers.Lost()
		if errors.Is(err, rueidis.ErrClosing) {
			return
		}
		// Until the subscription is back, cached denials stay silent.
		if heard {
			backoff = first
		}
		if !s.sleep(backoff) {
			return
		}
		backoff = min(2*backoff, time.Second)
	}
}

// Join implements [driver.Fleet]: a goroutine of the store announces this
// instance for m.Policy every two seconds, in a sorted set named
// <prefix>:<policy>:fleet, and an announcement counts for six seconds, or
// until the store is closed; instances on redisstore are counted too.
// Each announcement reads every instance's, as redisstore's does: how
// many there are, the largest Keep and Window any announces, the newest
// format every instance reads, and the configurations that differ from
// m.Config, which m.Differ hears.
func (s *Store) Join(m driver.Member) func() int {
	p, fresh := s.fleet.Join(m)
	if fresh {
		// Counted at once, not at the next beat.
		s.start(func() { _ = s.announce(p) })
	}
	s.beat.Do(func() { s.start(s.announceEvery) })
	return p.Instances()
}

// announceEvery announces the fleet every beat until the store or the
// client is closed.
func (s *Store) announceEvery() {
	for s.sleep(s.fleet.UntilBeat()) {
		for _, p := range s.fleet.Due() {
			if err := s.announce(p); errors.Is(err, rueidis.ErrClosing) {
				return
			}
		}
	}
}

// announce announces this instance for p in its sorted set, scored by
// when the announcement ends by the server's clock, drops the
// announcements that have ended, and hands the ones left to p.
func (s *Store) announce(p *redislib.FleetPolicy) error {
	ctx, cancel := context.WithTimeout(s.life, redislib.FleetBeat/2)
	defer cancel()
	b := s.client.B()
	now, err := s.client.Do(ctx, b.Time().Build()).AsIntSlice()
	if err != nil {
		return err
	}
	if len(now) != 2 {
		return fmt.Errorf("TIME answered %v", now)
	}
	ms := now[0]*1000 + now[1]/1000
	k := redislib.FleetKey(s.prefix, p.Name)
	rs := s.client.DoMulti(ctx,
		b.Multi().Build(),
		b.Zadd().Key(k).ScoreMember().ScoreMember(float64(ms+redislib.FleetTTL.Milliseconds()), p.Member).Build(),
		b.Zremrangebyscore().Key(k).Min("-inf").Max(strconv.FormatInt(ms, 10)).Build(),
		b.Pexpire().Key(k).Milliseconds(redislib.FleetTTL.Milliseconds()).Build(),
		b.Zrange().Key(k).Min("0").Max("-1").Build(),
		b.Time().Build(), // when the members were read: Heard keeps the latest
		b.Exec().Build())
	replies, err := rs[len(rs)-1].ToArray()
	if err != nil {
		return err
	}
	if len(replies) != 5 {
		return fmt.Errorf("EXEC answered %d replies", len(replies))
	}
	members, err := replies[3].AsStrSlice()
	if err != nil {
		return err
	}
	at, err := replies[4].AsIntSlice()
	if err != nil || len(at) != 2 {
		return fmt.Errorf("TIME answered %v: %w", at, err)
	}
	if s.life.Err() == nil {
		p.Heard(at[0]*1_000_000+at[1], members)
	}
	return nil
}

// sleep waits for d, and reports false if the store was closed first.
func (s *Store) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.life.Done():
		return false
	}
}

// Partition implements [driver.Partitioned]: on a Redis Cluster, the
// address (host:port, as CLUSTER SLOTS names it) of the master that
// serves the key's slot, found by the key's hash tag as Redis finds it;
// until the store has loaded the Cluster's slot map (at its first use),
// the fixed group of 256 slots that holds the slot ("slots-<n>");
// elsewhere, one partition. Names are redisstore's. So a limiter keeps a
// circuit breaker per master, and a master that fails switches only its
// own keys to the failure policy.
func (s *Store) Partition(policy, key string) string {
	if s.nodes == nil {
		return ""
	}
	return s.nodes.Partition(redislib.KeySlot(s.prefix, policy, key))
}
