package core

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// ErrUnsafeEviction is wrapped by the error [RedisStore.Check] returns when
// a Redis server's maxmemory-policy lets it evict live limiter keys.
//
// An evicted key is a forgotten window: the key's next request is
// admitted as if it had made none, and an attacker can force evictions
// with a flood of random keys. Every policy but noeviction can evict
// limiter keys: the allkeys-* policies pick among all keys, and the
// volatile-* policies among the keys with a time to live, which every
// limiter key has (it expires just after its longest window), so
// volatile-* protects only the app's keys without one. volatile-ttl
// evicts the keys nearest to expiry first: limiter keys idle for almost
// their longest window, whose entries still count until then.
//
// Safe settings: maxmemory-policy noeviction, where a full Redis refuses
// writes, the store call fails and the [FailurePolicy] decides (reported
// to the observers); or a Redis of the limiter's own with memory sized
// for its keys and no maxmemory.
var ErrUnsafeEviction = errors.New("eviction policy can drop live limiter keys")

// Check reports whether the Redis server keeps limiter keys until they
// expire. It returns an error wrapping [ErrUnsafeEviction], naming the
// server and its maxmemory-policy, when the policy is anything but
// noeviction (see ErrUnsafeEviction for why). On a Redis Cluster it checks
// every master.
//
// It reads CONFIG GET maxmemory-policy and, where CONFIG is renamed or not
// permitted (as on many managed services), the maxmemory_policy field of
// INFO memory. When neither answers, or the server cannot be reached, it
// returns that error, which does not wrap ErrUnsafeEviction. Check
// returns by ctx's deadline. Call it once at start-up, or call
// [Limiter.Check] to report the result to the limiter's observers too.
func (s *RedisStore) Check(ctx context.Context) error {
	var (
		mu   sync.Mutex
		errs []error
	)
	each := func(ctx context.Context, node *redis.Client) error {
		if err := s.checkNode(ctx, node); err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
		return nil
	}
	var err error
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, each)
	case *redis.Ring:
		err = c.ForEachShard(ctx, each)
	default:
		return s.checkNode(ctx, s.client)
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("ratekit: redis store: check: %w", err))
	}
	return errors.Join(errs...)
}

// checkNode checks the eviction policy of one server.
func (s *RedisStore) checkNode(ctx context.Context, c redis.UniversalClient) error {
	addr := "redis"
	if n, ok := c.(*redis.Client); ok {
		addr = n.Options().Addr
	}
	e, err := bounded(ctx, s.honorsCtx, func() (eviction, error) {
		return readEviction(ctx, c)
	})
	if err != nil {
		return fmt.Errorf("ratekit: redis store: check %s: %w", addr, err)
	}
	return e.check(addr)
}

// eviction is a server's maxmemory-policy and maxmemory (bytes; 0 means
// no limit, or unknown).
type eviction struct {
	policy    string
	maxmemory int64
}

// readEviction reads the eviction settings with CONFIG GET, else with
// INFO memory.
func readEviction(ctx context.Context, c redis.UniversalClient) (eviction, error) {
	cfg, cerr := c.ConfigGet(ctx, "maxmemory*").Result()
	if cerr == nil {
		if cfg["maxmemory-policy"] != "" {
			mm, _ := strconv.ParseInt(cfg["maxmemory"], 10, 64)
			return eviction{policy: cfg["maxmemory-policy"], maxmemory: mm}, nil
		}
		cerr = errors.New("no maxmemory-policy in the answer")
	}
	if ctx.Err() != nil {
		return eviction{}, ctx.Err()
	}
	info, ierr := c.Info(ctx, "memory").Result()
	if ierr != nil {
		return eviction{}, fmt.Errorf("CONFIG GET maxmemory-policy: %w; INFO memory: %w", cerr, ierr)
	}
	var e eviction
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "maxmemory_policy:"); ok {
			e.policy = v
		} else if v, ok := strings.CutPrefix(line, "maxmemory:"); ok {
			e.maxmemory, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if e.policy == "" {
		return eviction{}, fmt.Errorf("CONFIG GET maxmemory-policy: %w; INFO memory has no maxmemory_policy", cerr)
	}
	return e, nil
}

func (e eviction) check(addr string) error {
	if e.policy == "noeviction" {
		return nil
	}
	limit := "no maxmemory yet"
	if e.maxmemory > 0 {
		limit = "maxmemory " + strconv.FormatInt(e.maxmemory, 10) + " bytes"
	}
	return fmt.Errorf("ratekit: redis store: %s: maxmemory-policy %s (%s) can evict live limiter keys, resetting their limits; use noeviction: %w",
		addr, e.policy, limit, ErrUnsafeEviction)
}

// Check asks the limiter's store whether it is configured so that limits
// hold, if the store has a method Check(ctx context.Context) error, as
// [RedisStore] has (a [MemoryStore] has none: it passes),
// and reports a failed check to the limiter's observers as an
// [EventStoreCheck] event. It returns the store's error: with a
// [RedisStore], one wrapping [ErrUnsafeEviction] for a server that can
// evict limiter keys. Call it once at start-up, with a context that
// bounds it (the limiter's timeout does not apply); whether to refuse to
// start is the caller's choice.
func (l *Limiter) Check(ctx context.Context) error {
	c, ok := l.store.(interface{ Check(context.Context) error })
	if !ok {
		return nil
	}
	err := c.Check(ctx)
	if err != nil {
		l.emit(ctx, Event{Kind: EventStoreCheck, Err: err})
	}
	return err
}
