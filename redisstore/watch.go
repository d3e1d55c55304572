package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/internal/redislib"
)

// watcher carries invalidations between the instances of a Store and
// counts them: one goroutine subscribes to the store's channel, hands
// what it hears to the watchers, and announces this instance for every
// policy joined ([Store.Join]).
type watcher struct {
	s        *Store
	channel  string
	watchers *redislib.Watchers
	fleet    *redislib.Fleet
	start    sync.Once
}

func newWatcher(s *Store) *watcher {
	return &watcher{s: s, channel: redislib.Channel(s.prefix), watchers: redislib.NewWatchers(s.prefix), fleet: redislib.NewFleet()}
}

// Watch implements [driver.Invalidator]: f hears every reset and refund of
// policy's keys and every tier invalidation, from any instance on this
// Redis and prefix, through the store's pub/sub channel
// (<prefix>:invalidate), and a Resync at every (re)subscription.
func (s *Store) Watch(policy string, f func(driver.Invalidation)) {
	s.watch.watchers.Add(policy, f)
	s.watch.start.Do(func() { go s.watch.run() })
}

// Invalidate implements [driver.Invalidator]: it publishes the tier
// invalidation of policy's bounded key.
func (s *Store) Invalidate(ctx context.Context, policy, key string) error {
	msg := redislib.Key(s.prefix, policy, key) + redislib.TierSuffix
	_, err := redislib.Bounded(ctx, func(ctx context.Context) (int64, error) {
		return s.client.Publish(ctx, s.watch.channel, msg).Result()
	})
	if err != nil {
		return fmt.Errorf("ratekit: redis store: invalidate: %w", err)
	}
	return nil
}

// run receives invalidations, and announces the fleet every beat, until
// the client is closed.
func (w *watcher) run() {
	ctx := context.Background()
	ps := w.s.client.Subscribe(ctx, w.channel)
	defer ps.Close()
	backoff := 10 * time.Millisecond
	for {
		msg, err := ps.ReceiveTimeout(ctx, w.fleet.UntilBeat())
		if err == nil {
			backoff = 10 * time.Millisecond
			w.handle(msg)
		}
		for p, n := range w.fleet.Due() {
			w.announce(p, n)
		}
		if err != nil {
			if errors.Is(err, redis.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue // time to announce
			}
			w.watchers.Lost()
			// go-redis reconnects and subscribes again on the next
			// Receive; until then cached denials stay silent.
			time.Sleep(backoff)
			backoff = min(2*backoff, time.Second)
		}
	}
}

// handle acts on one message of the subscription.
func (w *watcher) handle(msg any) {
	switch m := msg.(type) {
	case *redis.Subscription:
		if m.Kind == "subscribe" {
			w.watchers.Subscribed()
		}
	case *redis.Message:
		w.watchers.Message(m.Payload)
	}
}

// Join implements [driver.Fleet]: the store's subscription goroutine
// announces this instance for policy every two seconds, in a sorted set
// named <prefix>:<policy>:fleet, and an announcement counts for six
// seconds.
func (s *Store) Join(policy string) func() int {
	n, fresh := s.watch.fleet.Join(policy)
	if fresh {
		// Counted at once, not at the next beat.
		go s.watch.announce(policy, n)
	}
	s.watch.start.Do(func() { go s.watch.run() })
	return redislib.Instances(n)
}

// announce announces this instance for policy in its sorted set, scored
// by when the announcement ends by the server's clock, drops the
// announcements that have ended, and stores how many are left.
func (w *watcher) announce(policy string, n *atomic.Int64) {
	ctx, cancel := context.WithTimeout(context.Background(), redislib.FleetBeat/2)
	defer cancel()
	now, err := w.s.client.Time(ctx).Result()
	if err != nil {
		return
	}
	k, ms := redislib.FleetKey(w.s.prefix, policy), now.UnixMilli()
	var card *redis.IntCmd
	_, err = w.s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAdd(ctx, k, redis.Z{Score: float64(ms + redislib.FleetTTL.Milliseconds()), Member: w.fleet.Instance})
		p.ZRemRangeByScore(ctx, k, "-inf", strconv.FormatInt(ms, 10))
		p.PExpire(ctx, k, redislib.FleetTTL)
		card = p.ZCard(ctx, k)
		return nil
	})
	if err == nil {
		n.Store(card.Val())
	}
}

// Partition implements [driver.Partitioned]: on a Redis Cluster, the
// address (host:port, as CLUSTER SLOTS names it) of the master that
// serves the key's slot, found by the key's hash tag as Redis finds it;
// until the store has loaded the Cluster's slot map (at its first use),
// the fixed group of 256 slots that holds the slot ("slots-<n>");
// elsewhere, one partition. So a limiter keeps a circuit breaker per
// master, and a master that fails switches only its own keys to the
// failure policy.
func (s *Store) Partition(policy, key string) string {
	if s.nodes == nil {
		return ""
	}
	return s.nodes.Partition(redislib.KeySlot(s.prefix, policy, key))
}
