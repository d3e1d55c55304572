package core

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// watcher keeps the caches of a RedisStore's limiters true on every
// instance. A refund or reset publishes the Redis key on the store's
// channel, and every instance subscribed to it forgets the key's cached
// denial; [Limiter.InvalidateTier] publishes the key's Redis name with
// tierSuffix appended, and every instance forgets the key's cached tier.
// (A deny-cache message ends in "}" or "}:b", so a watcher that knows no
// tier messages ignores them.) The deny caches answer nothing until the
// first subscription is confirmed. Messages sent while the subscription
// is down are lost, so each resubscription starts a new epoch: denials
// cached before it no longer answer while the store does (the store
// decides again), but still answer while it fails, so that a Redis outage
// keeps denied keys denied; and every cached tier is forgotten.
type watcher struct {
	s       *RedisStore
	channel string
	live    atomic.Bool   // subscribed once: cached denials may answer
	epoch   atomic.Uint64 // subscriptions: denials cached before the last may be stale

	mu     sync.Mutex
	caches map[string][]*denyCache  // by policy name
	tiers  map[string][]*tierSet    // by policy name
	fleet  map[string]*atomic.Int64 // instances by policy name (Join)
	start  sync.Once

	instance string    // this process's name in the fleet keys
	beat     time.Time // when the fleet was last announced
}

// tierSuffix ends the message of a tier invalidation.
const tierSuffix = ":tier"

func newWatcher(s *RedisStore) *watcher {
	return &watcher{s: s, channel: s.prefix + ":invalidate", instance: strconv.FormatUint(rand.Uint64(), 36),
		caches: make(map[string][]*denyCache), tiers: make(map[string][]*tierSet), fleet: make(map[string]*atomic.Int64)}
}

// add registers a limiter's deny cache for policy, starting the
// subscription on first use.
func (w *watcher) add(policy string, c *denyCache) {
	c.live, c.epoch = &w.live, &w.epoch
	w.mu.Lock()
	w.caches[policy] = append(w.caches[policy], c)
	w.mu.Unlock()
	w.start.Do(func() { go w.run() })
}

// addTiers registers a limiter's tier cache for policy, starting the
// subscription on first use.
func (w *watcher) addTiers(policy string, ts *tierSet) {
	w.mu.Lock()
	w.tiers[policy] = append(w.tiers[policy], ts)
	w.mu.Unlock()
	w.start.Do(func() { go w.run() })
}

// publishTier tells every instance to forget the cached tier of the
// bounded key under policy.
func (s *RedisStore) publishTier(ctx context.Context, policy, key string) error {
	msg := s.redisKey(policy, key) + tierSuffix
	_, err := bounded(ctx, func(ctx context.Context) (int64, error) {
		return s.client.Publish(ctx, s.watch.channel, msg).Result()
	})
	return err
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
			// go-redis reconnects and subscribes again on the next
			// Receive; until then cached denials stay silent.
			time.Sleep(backoff)
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 10 * time.Millisecond
		w.handle(msg)
	}
}

// handle acts on one message of the subscription.
func (w *watcher) handle(msg any) {
	switch m := msg.(type) {
	case *redis.Subscription:
		if m.Kind == "subscribe" {
			// Invalidations sent before now may have been missed.
			w.mu.Lock()
			for _, tss := range w.tiers {
				for _, ts := range tss {
					ts.forgetAll()
				}
			}
			w.mu.Unlock()
			w.epoch.Add(1)
			w.live.Store(true)
		}
	case *redis.Message:
		if rk, ok := strings.CutSuffix(m.Payload, tierSuffix); ok {
			if policy, key, ok := w.s.parseKey(rk); ok {
				w.mu.Lock()
				tss := w.tiers[policy]
				w.mu.Unlock()
				for _, ts := range tss {
					ts.forget(key)
				}
			}
		} else if policy, key, ok := w.s.parseKey(m.Payload); ok {
			w.mu.Lock()
			cs := w.caches[policy]
			w.mu.Unlock()
			for _, c := range cs {
				c.remove(key)
			}
		}
	}
}

// fleetBeat is how often a RedisStore announces its instance for every
// policy its limiters joined, and fleetTTL how long an announcement
// counts: an instance that stops is no longer counted after at most
// fleetTTL.
const (
	fleetBeat = 2 * time.Second
	fleetTTL  = 3 * fleetBeat
)

// Join implements [Fleet]: the store's subscription goroutine announces
// this instance for policy every two seconds, in a sorted set named
// <prefix>:<policy>:fleet, and an announcement counts for six seconds.
func (s *RedisStore) Join(policy string) func() int {
	w := s.watch
	w.mu.Lock()
	n := w.fleet[policy]
	fresh := n == nil
	if fresh {
		n = new(atomic.Int64)
		w.fleet[policy] = n
	}
	w.mu.Unlock()
	if fresh {
		// Counted at once, not at the next beat.
		go w.announce(policy, n)
	}
	w.start.Do(func() { go w.run() })
	return func() int { return int(max(1, n.Load())) }
}

// fleetKey names the sorted set of the instances that use policy.
func (s *RedisStore) fleetKey(policy string) string { return s.prefix + ":" + policy + ":fleet" }

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
	k, ms := w.s.fleetKey(policy), now.UnixMilli()
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

// parseKey splits a Redis key <prefix>:<policy>:{<key>}[:b] into its
// policy and (bounded) key.
func (s *RedisStore) parseKey(rk string) (policy, key string, ok bool) {
	rest, ok := strings.CutPrefix(rk, s.prefix+":")
	if !ok {
		return "", "", false
	}
	policy, rest, ok = strings.Cut(rest, ":{") // policy names hold no '{'
	if !ok {
		return "", "", false
	}
	rest = strings.TrimSuffix(rest, ":b")
	key, ok = strings.CutSuffix(rest, "}")
	return policy, key, ok
}

// redisOps is what a Limiter asks of a RedisStore beyond [Store]. The
// Limiter finds it by an assertion to this interface, not to
// *RedisStore, so that a program that never makes a RedisStore does not
// link the Redis client.
type redisOps interface {
	decideValue(ctx context.Context, q Query, op byte) (allowed bool, when int64, st states, err error)
	leaseOp(ctx context.Context, policy, key string, op byte, ls *leaseSet, seq, n, now int64) (allowed bool, used int64, err error)
	leaseCall(policy, key string, op byte, ls *leaseSet, seq, n, now int64) *rcall
	flight(ctx context.Context, calls []*rcall)
	publishTier(ctx context.Context, policy, key string) error
	isCluster() bool
	watchDenials(policy string, c *denyCache)
	watchTiers(policy string, ts *tierSet)
}

func (s *RedisStore) isCluster() bool { return s.cluster }

// decideValue is decide for a Limiter, with the query and the states
// passed by value.
func (s *RedisStore) decideValue(ctx context.Context, q Query, op byte) (allowed bool, when int64, st states, err error) {
	allowed, when, err = s.decide(ctx, &q, op, 0, &st)
	return allowed, when, st, err
}

// watchDenials makes reset and refund messages from every instance
// reach c, the deny cache of policy.
func (s *RedisStore) watchDenials(policy string, c *denyCache) { s.watch.add(policy, c) }

// watchTiers makes tier invalidations from every instance reach ts.
func (s *RedisStore) watchTiers(policy string, ts *tierSet) { s.watch.addTiers(policy, ts) }
