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

// ErrMisconfigured is wrapped by the error a store's Check returns when
// the store is configured so that no decision can succeed until someone
// changes its configuration: for Redis a wrong password or ACL user, a
// database index the server does not have, an ACL that forbids the
// commands the store sends (its Lua functions or scripts, PUBLISH on its
// invalidation channel), a server that runs no Lua, or a key the store
// keeps holding a value of another type. Such a store is not down and will
// not come back by itself: report it and stop, rather than wait for it as
// for a store that does not answer yet (whose error wraps neither this
// nor [ErrUnsafeEviction]).
var ErrMisconfigured = errors.New("store misconfigured")

// Check reports whether the store can work and keeps limiter keys until
// they expire. On a Redis Cluster it checks every master.
//
// First it runs what decisions need on the server: a connection (the
// password, ACL user and database of the client's options), the store's
// Lua library (loaded if missing) and lease script, a PUBLISH on its
// invalidation channel, and the type of the keys that count the instances
// of the policies its limiters use. An answer that no retry can change
// returns an error wrapping [ErrMisconfigured] that names the server and
// the reason. A server that cannot be reached, or answers LOADING, returns
// that error, which wraps neither: it does not answer yet.
//
// Then it reads the eviction policy, with CONFIG GET maxmemory-policy or,
// where CONFIG is renamed or not permitted (as on many managed services),
// the maxmemory_policy field of INFO memory, and returns an error wrapping
// [ErrUnsafeEviction], naming the server and its policy, when it is
// anything but noeviction (see ErrUnsafeEviction for why); when neither
// answers, that error.
//
// Check returns by ctx's deadline. Call it once at start-up, or call
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
	e, err := bounded(ctx, func(ctx context.Context) (eviction, error) {
		if err := s.usable(ctx, c); err != nil {
			return eviction{}, err
		}
		return readEviction(ctx, c)
	})
	switch {
	case err != nil && misconfigured(err):
		return fmt.Errorf("ratekit: redis store: %s cannot be used: %w: %w", addr, ErrMisconfigured, err)
	case err != nil:
		return fmt.Errorf("ratekit: redis store: check %s: %w", addr, err)
	}
	return e.check(addr)
}

// usable runs on the server c talks to what the store's decisions need:
// a connection, the Lua library, the lease script, a PUBLISH on the
// invalidation channel; and checks that the fleet keys of the policies
// joined hold sorted sets.
func (s *RedisStore) usable(ctx context.Context, c redis.UniversalClient) error {
	if err := c.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("PING: %w", err)
	}
	if err := s.runLibrary(ctx, c); err != nil {
		return err
	}
	if err := c.Eval(ctx, leaseSource, []string{}, "").Err(); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("the lease script: %w", err)
	}
	if err := c.Publish(ctx, s.watch.channel, "").Err(); err != nil {
		return fmt.Errorf("PUBLISH %s: %w", s.watch.channel, err)
	}
	s.watch.mu.Lock()
	policies := make([]string, 0, len(s.watch.fleet))
	for p := range s.watch.fleet {
		policies = append(policies, p)
	}
	s.watch.mu.Unlock()
	for _, p := range policies {
		k := s.fleetKey(p)
		typ, err := c.Type(ctx, k).Result()
		if err != nil {
			return fmt.Errorf("TYPE %s: %w", k, err)
		}
		if typ != "zset" && typ != "none" {
			return fmt.Errorf("key %s holds a %s, where the store counts the instances of policy %q in a sorted set: %w",
				k, typ, p, errWrongType)
		}
	}
	return nil
}

// errWrongType is the error of a key the store keeps holding a value of
// another type.
var errWrongType = errors.New("WRONGTYPE")

// runLibrary calls the store's Lua library on no keys: as a function,
// loading it if it is missing, or where the server has no functions as a
// script.
func (s *RedisStore) runLibrary(ctx context.Context, c redis.UniversalClient) error {
	err := c.FCall(ctx, fnLog, []string{}, "").Err()
	if redis.HasErrorPrefix(err, "Function not found") {
		if lerr := s.loadLibrary(ctx, c); lerr != nil {
			return fmt.Errorf("FUNCTION LOAD: %w", lerr)
		}
		err = c.FCall(ctx, fnLog, []string{}, "").Err()
	}
	if isUnknownCommand(err) || redis.HasErrorPrefix(err, "NOPERM") {
		// Decisions run it as a script where FCALL is missing or not
		// permitted.
		err = c.Eval(ctx, logSource, []string{}, "").Err()
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("the Lua library: %w", err)
	}
	return nil
}

// misconfigured reports an error that no retry can change: the server
// refused the client's credentials, database or commands.
func misconfigured(err error) bool {
	if errors.Is(err, errWrongType) {
		return true
	}
	for _, p := range []string{"WRONGPASS", "NOAUTH", "NOPERM", "WRONGTYPE", "DB index", "invalid DB index",
		"unknown command", "AUTH", "invalid password", "Client sent AUTH", "invalid username"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
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
