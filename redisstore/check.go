package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/internal/redislib"
)

// Check reports whether the store can work and keeps limiter keys until
// they expire. On a Redis Cluster it checks every master.
//
// First it runs what decisions need on the server: a connection (the
// password, ACL user and database of the client's options), the store's
// Lua library (loaded if missing) and lease script, a PUBLISH on its
// invalidation channel, and the type of the keys that count the instances
// of the policies its limiters use. An answer that no retry can change
// returns an error wrapping [driver.ErrMisconfigured] that names the server and
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
// Last, it announces this instance for every policy joined and reads
// every instance's announcement, so that a limiter's Check reports the
// instances that use one of its policies with other rules.
//
// Check returns by ctx's deadline. Call it once at start-up, or call
// [core.Limiter.Check] to report the result to the limiter's observers too.
func (s *Store) Check(ctx context.Context) error {
	err := s.check(ctx)
	for _, p := range s.watch.fleet.Policies() {
		s.watch.announce(p)
	}
	return err
}

// check is Check but the announcements.
func (s *Store) check(ctx context.Context) error {
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
		errs = append(errs, fmt.Errorf("redisstore: check: %w", err))
	}
	return errors.Join(errs...)
}

// checkNode checks the eviction policy of one server.
func (s *Store) checkNode(ctx context.Context, c redis.UniversalClient) error {
	addr := "redis"
	if n, ok := c.(*redis.Client); ok {
		addr = n.Options().Addr
	}
	e, err := redislib.Bounded(ctx, func(ctx context.Context) (redislib.Eviction, error) {
		if err := s.usable(ctx, c); err != nil {
			return redislib.Eviction{}, err
		}
		return readEviction(ctx, c)
	})
	switch {
	case err != nil && misconfigured(err):
		return fmt.Errorf("redisstore: %s cannot be used: %w: %w", addr, driver.ErrMisconfigured, err)
	case err != nil:
		return fmt.Errorf("redisstore: check %s: %w", addr, err)
	}
	if err := e.Check(addr); err != nil {
		return fmt.Errorf("redisstore: %w", err)
	}
	return nil
}

// usable runs on the server c talks to what the store's decisions need:
// a connection, the Lua library, the lease script, a PUBLISH on the
// invalidation channel; and checks that the fleet keys of the policies
// joined hold sorted sets.
func (s *Store) usable(ctx context.Context, c redis.UniversalClient) error {
	if err := c.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("PING: %w", err)
	}
	if err := s.runLibrary(ctx, c); err != nil {
		return err
	}
	if err := c.Eval(ctx, redislib.LeaseScript.Source, []string{}, "").Err(); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("the lease script: %w", err)
	}
	if err := c.Publish(ctx, s.watch.channel, "").Err(); err != nil {
		return fmt.Errorf("PUBLISH %s: %w", s.watch.channel, err)
	}
	for _, p := range s.watch.fleet.Policies() {
		k := redislib.FleetKey(s.prefix, p.Name)
		typ, err := c.Type(ctx, k).Result()
		if err != nil {
			return fmt.Errorf("TYPE %s: %w", k, err)
		}
		if typ != "zset" && typ != "none" {
			return fmt.Errorf("key %s holds a %s, where the store counts the instances of policy %q in a sorted set: %w",
				k, typ, p.Name, errWrongType)
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
func (s *Store) runLibrary(ctx context.Context, c redis.UniversalClient) error {
	err := c.FCall(ctx, redislib.LogFunction, []string{}, "").Err()
	if redis.HasErrorPrefix(err, "Function not found") {
		err = s.loadLibrary(ctx, c)
		if err == nil {
			err = c.FCall(ctx, redislib.LogFunction, []string{}, "").Err()
		} else if !redis.HasErrorPrefix(err, "unknown command") && !redis.HasErrorPrefix(err, "NOPERM") {
			return fmt.Errorf("FUNCTION LOAD: %w", err)
		}
	}
	if redis.HasErrorPrefix(err, "unknown command") || redis.HasErrorPrefix(err, "NOPERM") {
		// Decisions run it as a script where FCALL, or FUNCTION LOAD
		// (an ACL of "+@all -function"), is missing or not permitted.
		err = c.Eval(ctx, redislib.LogScript.Source, []string{}, "").Err()
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
	var re redis.Error
	return errors.As(err, &re) && redislib.Misconfigured(re.Error())
}

// readEviction reads the eviction settings with CONFIG GET, else with
// INFO memory.
func readEviction(ctx context.Context, c redis.UniversalClient) (redislib.Eviction, error) {
	cfg, cerr := c.ConfigGet(ctx, "maxmemory*").Result()
	if cerr == nil {
		if e, ok := redislib.EvictionOfConfig(cfg); ok {
			return e, nil
		}
		cerr = errors.New("no maxmemory-policy in the answer")
	}
	if ctx.Err() != nil {
		return redislib.Eviction{}, ctx.Err()
	}
	info, ierr := c.Info(ctx, "memory").Result()
	if ierr != nil {
		return redislib.Eviction{}, fmt.Errorf("CONFIG GET maxmemory-policy: %w; INFO memory: %w", cerr, ierr)
	}
	e, ok := redislib.EvictionOfInfo(info)
	if !ok {
		return redislib.Eviction{}, fmt.Errorf("CONFIG GET maxmemory-policy: %w; INFO memory has no maxmemory_policy", cerr)
	}
	return e, nil
}
