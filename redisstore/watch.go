package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/internal/redislib"
)

// watcher carries invalidations between the instances of a Store and
// counts them: one goroutine subscribes to the store's channel, hands
// what it hears to the watchers, and announces this instance for every
// policy joined ([Store.Join]), until the store is closed.
type watcher struct {
	s        *Store
	channel  string
	watchers *redislib.Watchers
	fleet    *redislib.Fleet
	start    sync.Once
	life     context.Context // ended by Close
	stop     context.CancelFunc
	done     chan struct{}  // closed when run has returned
	busy     sync.WaitGroup // announcements under way off run
	mu       sync.Mutex
	closed   bool          // Close has begun: nothing more goes on busy
	ps       *redis.PubSub // run's subscription, closed by Close
}

func newWatcher(s *Store) *watcher {
	w := &watcher{s: s, channel: redislib.Channel(s.prefix), watchers: redislib.NewWatchers(s.prefix), fleet: redislib.NewFleet(),
		done: make(chan struct{})}
	w.life, w.stop = context.WithCancel(context.Background())
	return w
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
		return fmt.Errorf("redisstore: invalidate: %w", err)
	}
	return nil
}

// run receives invalidations, and announces the fleet every beat, until
// the store or the client is closed.
func (w *watcher) run() {
	defer close(w.done)
	ctx := w.life
	ps := w.s.client.Subscribe(ctx, w.channel)
	defer ps.Close()
	w.mu.Lock()
	w.ps = ps
	closed := w.closed
	w.mu.Unlock()
	if closed {
		return
	}
	backoff := 10 * time.Millisecond
	for {
		msg, err := ps.ReceiveTimeout(ctx, w.fleet.UntilBeat())
		if err == nil {
			backoff = 10 * time.Millisecond
			w.handle(msg)
		}
		for _, p := range w.fleet.Due() {
			w.announce(p)
		}
		if err != nil {
			if errors.Is(err, redis.ErrClosed) || ctx.Err() != nil {
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
// announces this instance for m.Policy every two seconds, in a sorted set
// named <prefix>:<policy>:fleet, and an announcement counts for six
// seconds, or until the store is closed. Each announcement reads every
// instance's: how many there are, the largest Keep and Window any
// announces, which the store then keeps for every key of the policy, the
// newest format of the stored values that every instance reads, in
// which the store writes them, and the configurations that differ from
// m.Config, which m.Differ hears.
func (s *Store) Join(m driver.Member) func() int {
	p, fresh := s.watch.fleet.Join(m)
	if fresh {
		// Counted at once, not at the next beat.
		w := s.watch
		w.mu.Lock()
		if !w.closed {
			w.busy.Go(func() { w.announce(p) })
		}
		w.mu.Unlock()
	}
	s.watch.start.Do(func() { go s.watch.run() })
	return p.Instances()
}

// Close ends the store's goroutine (the subscription that carries
// invalidations to the limiters watching the store, and the announcements
// of this instance) and withdraws this instance's announcements, so that
// the instances that share a policy count one fewer at once. It returns
// when they have ended, within a second (announcements it could not
// withdraw then count until they expire, six seconds after the last). It
// does not close the client; decisions still work after Close, but no
// watcher hears invalidations any more and the fleet is no longer
// announced. Close a store that an
// app drops while it goes on (a configuration reload): otherwise it is
// counted among the policy's instances for as long as the process runs.
func (s *Store) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	w := s.watch
	w.mu.Lock()
	w.closed = true
	if w.ps != nil {
		_ = w.ps.Close() // run's receive returns at once
	}
	w.mu.Unlock()
	ps := w.fleet.Leave()
	w.stop()
	started := true
	w.start.Do(func() { started = false }) // never started: nothing to wait for
	ended := make(chan struct{})
	go func() {
		if started {
			<-w.done
		}
		w.busy.Wait()
		close(ended)
	}()
	select {
	case <-ended:
	case <-ctx.Done():
		return
	}
	if len(ps) == 0 {
		return
	}
	_, _ = s.client.Pipelined(ctx, func(p redis.Pipeliner) error { // at worst, they count until they expire
		for _, fp := range ps {
			p.ZRem(ctx, redislib.FleetKey(s.prefix, fp.Name), fp.Member)
		}
		return nil
	})
}

// closeTimeout bounds Close.
const closeTimeout = time.Second

// announce announces this instance for p in its sorted set, scored by
// when the announcement ends by the server's clock, drops the
// announcements that have ended, and hands the ones left to p.
func (w *watcher) announce(p *redislib.FleetPolicy) {
	ctx, cancel := context.WithTimeout(w.life, redislib.FleetBeat/2)
	defer cancel()
	now, err := w.s.client.Time(ctx).Result()
	if err != nil {
		return
	}
	k, ms := redislib.FleetKey(w.s.prefix, p.Name), now.UnixMilli()
	var (
		members *redis.StringSliceCmd
		at      *redis.TimeCmd
	)
	_, err = w.s.client.TxPipelined(ctx, func(pp redis.Pipeliner) error {
		pp.ZAdd(ctx, k, redis.Z{Score: float64(ms + redislib.FleetTTL.Milliseconds()), Member: p.Member})
		pp.ZRemRangeByScore(ctx, k, "-inf", strconv.FormatInt(ms, 10))
		pp.PExpire(ctx, k, redislib.FleetTTL)
		members = pp.ZRange(ctx, k, 0, -1)
		at = pp.Time(ctx) // when the members were read: Heard keeps the latest
		return nil
	})
	if err == nil && w.life.Err() == nil {
		p.Heard(at.Val().UnixMicro(), members.Val())
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
