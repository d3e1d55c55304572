package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redislib"
)

// watcher carries invalidations between the instances of a Store and
// counts them. A refund or reset publishes the Redis key on the store's
// channel, and every instance hears it; [Store.Invalidate] publishes the
// key's Redis name with a tier suffix. Messages sent while the
// subscription is down are lost, so each (re)subscription tells every
// watcher to resync. The same goroutine announces this instance for
// every policy joined ([Store.Join]).
type watcher struct {
	s       *Store
	channel string

	mu         sync.Mutex
	watchers   map[string][]func(core.Invalidation) // by policy name
	subscribed bool                                 // the subscription is confirmed
	fleet      map[string]*atomic.Int64             // instances by policy name (Join)
	start      sync.Once

	instance string    // this process's name in the fleet keys
	beat     time.Time // when the fleet was last announced
}

func newWatcher(s *Store) *watcher {
	return &watcher{s: s, channel: redislib.Channel(s.prefix), instance: strconv.FormatUint(rand.Uint64(), 36),
		watchers: make(map[string][]func(core.Invalidation)), fleet: make(map[string]*atomic.Int64)}
}

// Watch implements [core.Invalidator]: f hears every reset and refund of
// policy's keys and every tier invalidation, from any instance on this
// Redis and prefix, through the store's pub/sub channel
// (<prefix>:invalidate), and a Resync at every (re)subscription.
func (s *Store) Watch(policy string, f func(core.Invalidation)) {
	w := s.watch
	w.mu.Lock()
	w.watchers[policy] = append(w.watchers[policy], f)
	subscribed := w.subscribed
	w.mu.Unlock()
	if subscribed {
		// Listening already: f hears everything from now on.
		f(core.Invalidation{Resync: true})
	}
	w.start.Do(func() { go w.run() })
}

// Invalidate implements [core.Invalidator]: it publishes the tier
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

// run receives invalidations, and announces the fleet every fleetBeat,
// until the client is closed.
func (w *watcher) run() {
	ctx := context.Background()
	ps := w.s.client.Subscribe(ctx, w.channel)
	defer ps.Close()
	backoff := 10 * time.Millisecond
	for {
		msg, err := ps.ReceiveTimeout(ctx, w.untilBeat())
		if err == nil {
			backoff = 10 * time.Millisecond
			w.handle(msg)
		}
		if w.beatDue() {
			w.announceAll()
		}
		if err != nil {
			if errors.Is(err, redis.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue // time to announce
			}
			w.mu.Lock()
			w.subscribed = false
			w.mu.Unlock()
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
			// Invalidations sent before now may have been missed.
			w.mu.Lock()
			w.subscribed = true
			var fs []func(core.Invalidation)
			for _, f := range w.watchers {
				fs = append(fs, f...)
			}
			w.mu.Unlock()
			for _, f := range fs {
				f(core.Invalidation{Resync: true})
			}
		}
	case *redis.Message:
		rk, tier := strings.CutSuffix(m.Payload, redislib.TierSuffix)
		policy, key, ok := redislib.ParseKey(w.s.prefix, rk)
		if !ok {
			return
		}
		w.mu.Lock()
		fs := w.watchers[policy]
		w.mu.Unlock()
		for _, f := range fs {
			f(core.Invalidation{Key: key, Tier: tier})
		}
	}
}

// fleetBeat is how often a Store announces its instance for every policy
// its limiters joined, and fleetTTL how long an announcement counts: an
// instance that stops is no longer counted after at most fleetTTL.
const (
	fleetBeat = 2 * time.Second
	fleetTTL  = 3 * fleetBeat
)

// Join implements [core.Fleet]: the store's subscription goroutine
// announces this instance for policy every two seconds, in a sorted set
// named <prefix>:<policy>:fleet, and an announcement counts for six
// seconds.
func (s *Store) Join(policy string) func() int {
	w := s.watch
	w.mu.Lock()
	n := w.fleet[policy]
	fresh := n == nil
	if fresh {
		n = new(atomic.Int64)
		w.fleet[policy] = n
		w.beat = time.Now() // announced below
	}
	w.mu.Unlock()
	if fresh {
		// Counted at once, not at the next beat.
		go w.announce(policy, n)
	}
	w.start.Do(func() { go w.run() })
	return func() int { return int(max(1, n.Load())) }
}

// announce announces this instance for policy in its sorted set, scored
// by when the announcement ends by the server's clock, drops the
// announcements that have ended, and stores how many are left.
func (w *watcher) announce(policy string, n *atomic.Int64) {
	ctx, cancel := context.WithTimeout(context.Background(), fleetBeat/2)
	defer cancel()
	now, err := w.s.client.Time(ctx).Result()
	if err != nil {
		return
	}
	k, ms := redislib.FleetKey(w.s.prefix, policy), now.UnixMilli()
	var card *redis.IntCmd
	_, err = w.s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAdd(ctx, k, redis.Z{Score: float64(ms + fleetTTL.Milliseconds()), Member: w.instance})
		p.ZRemRangeByScore(ctx, k, "-inf", strconv.FormatInt(ms, 10))
		p.PExpire(ctx, k, fleetTTL)
		card = p.ZCard(ctx, k)
		return nil
	})
	if err == nil {
		n.Store(card.Val())
	}
}

// untilBeat returns how long the subscription may wait for a message
// before the fleet is due to be announced; 0 (no limit) when no policy
// joined it.
func (w *watcher) untilBeat() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.fleet) == 0 {
		return 0
	}
	return max(time.Millisecond, time.Until(w.beat.Add(fleetBeat)))
}

// beatDue reports whether the fleet is due to be announced.
func (w *watcher) beatDue() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.fleet) > 0 && time.Since(w.beat) >= fleetBeat
}

// announceAll announces this instance for every policy it joined.
func (w *watcher) announceAll() {
	w.mu.Lock()
	w.beat = time.Now()
	policies := make(map[string]*atomic.Int64, len(w.fleet))
	for p, n := range w.fleet {
		policies[p] = n
	}
	w.mu.Unlock()
	for p, n := range policies {
		w.announce(p, n)
	}
}

// partitions names the groups of slots of a Cluster's breakers.
var partitions = func() [breakerGroups]string {
	var names [breakerGroups]string
	for i := range names {
		names[i] = "slots-" + strconv.Itoa(i)
	}
	return names
}()

// breakerGroups is the number of circuit breakers of a limiter on a Redis
// Cluster, each for 16384/breakerGroups slots.
const breakerGroups = 64

// Partition implements [core.Partitioned]: on a Redis Cluster, the group
// of slots of the key's slot; elsewhere, one partition.
func (s *Store) Partition(policy, key string) string {
	if !s.cluster {
		return ""
	}
	return partitions[redislib.KeySlot(s.prefix, policy, key)*breakerGroups/16384]
}
