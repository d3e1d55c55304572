package core

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// watcher keeps the deny caches of a RedisStore's limiters true on every
// instance: a refund or reset publishes the Redis key on the store's
// channel, and every instance subscribed to it forgets the key's cached
// denial. The caches answer nothing until the first subscription is
// confirmed. Messages sent while the subscription is down are lost, so
// each resubscription starts a new epoch: denials cached before it no
// longer answer while the store does (the store decides again), but still
// answer while it fails, so that a Redis outage keeps denied keys denied.
type watcher struct {
	s       *RedisStore
	channel string
	live    atomic.Bool   // subscribed once: cached denials may answer
	epoch   atomic.Uint64 // subscriptions: denials cached before the last may be stale

	mu     sync.Mutex
	caches map[string][]*denyCache // by policy name
	start  sync.Once
}

func newWatcher(s *RedisStore) *watcher {
	return &watcher{s: s, channel: s.prefix + ":invalidate", caches: make(map[string][]*denyCache)}
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

// run receives invalidations until the client is closed.
func (w *watcher) run() {
	ctx := context.Background()
	ps := w.s.client.Subscribe(ctx, w.channel)
	defer ps.Close()
	backoff := 10 * time.Millisecond
	for {
		msg, err := ps.Receive(ctx)
		if err != nil {
			if errors.Is(err, redis.ErrClosed) {
				return
			}
			// go-redis reconnects and subscribes again on the next
			// Receive; until then cached denials stay silent.
			time.Sleep(backoff)
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 10 * time.Millisecond
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				// Invalidations sent before now may have been missed.
				w.epoch.Add(1)
				w.live.Store(true)
			}
		case *redis.Message:
			if policy, key, ok := w.s.parseKey(m.Payload); ok {
				w.mu.Lock()
				cs := w.caches[policy]
				w.mu.Unlock()
				for _, c := range cs {
					c.remove(key)
				}
			}
		}
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
