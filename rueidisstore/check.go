package rueidisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"

	"github.com/redis/rueidis"

	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/internal/redislib"
)

// Check reports whether the store can work and keeps limiter keys until
// they expire. On a Redis Cluster it checks every master (as CLUSTER
// SLOTS names them).
//
// First it runs what decisions need on the server: a connection (the
// password, ACL user and database of the client's options), the store's
// Lua library (loaded if missing) and lease script, a PUBLISH on its
// invalidation channel, and the type of the keys that count the instances
// of the policies its limiters use. An answer that no retry can change
// returns an error wrapping [driver.ErrMisconfigured] that names the server
// and the reason. A server that cannot be reached, or answers LOADING,
// returns that error, which wraps neither: it does not answer yet. (A
// rueidis client connects when it is made, so a wrong password found then
// is rueidis.NewClient's error; Check finds one that changed later, when
// the client reconnects.)
//
// Then it reads the eviction policy, with CONFIG GET maxmemory-policy or,
// where CONFIG is renamed or not permitted (as on many managed services),
// the maxmemory_policy field of INFO memory, and returns an error wrapping
// [ErrUnsafeEviction], naming the server and its policy, when it is
// anything but noeviction; when neither answers, that error.
//
// Last, it announces this instance for every policy joined and reads
// every instance's announcement, so that a limiter's Check reports the
// instances that use one of its policies with other rules.
//
// Check returns by ctx's deadline. Call it once at start-up, or call
// [core.Limiter.Check] to report the result to the limiter's observers too.
func (s *Store) Check(ctx context.Context) error {
	err := s.check(ctx)
	for _, p := range s.fleet.Policies() {
		_ = s.announce(p)
	}
	return err
}

// check is Check but the announcements.
func (s *Store) check(ctx context.Context) error {
	nodes, err := redislib.Bounded(ctx, s.masters)
	if err != nil {
		if misconfigured(err) {
			return fmt.Errorf("rueidisstore: cannot be used: %w: %w", driver.ErrMisconfigured, err)
		}
		return fmt.Errorf("rueidisstore: check: %w", err)
	}
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { errs[i] = s.checkNode(ctx, n) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// node is a server of the store and a client that talks to it alone.
type node struct {
	addr   string
	client rueidis.Client
}

// masters returns the masters of a Cluster, or the server the client
// talks to.
func (s *Store) masters(ctx context.Context) ([]node, error) {
	all := s.client.Nodes()
	if !s.cluster {
		addr := "redis"
		if len(all) == 1 {
			for a := range all {
				addr = a
			}
		}
		return []node{{addr: addr, client: s.client}}, nil
	}
	ranges, err := s.clusterSlots(ctx)
	if err != nil {
		return nil, err
	}
	var nodes []node
	seen := make(map[string]bool)
	for _, r := range ranges {
		if seen[r.Addr] {
			continue
		}
		seen[r.Addr] = true
		c, ok := all[r.Addr]
		if !ok {
			return nil, fmt.Errorf("master %s is not among the client's nodes yet", r.Addr)
		}
		nodes = append(nodes, node{addr: r.Addr, client: c})
	}
	if len(nodes) == 0 {
		return nil, errors.New("CLUSTER SLOTS names no master")
	}
	return nodes, nil
}

// clusterSlots returns the slot ranges of the Cluster and the address of
// the master of each, by CLUSTER SLOTS.
func (s *Store) clusterSlots(ctx context.Context) ([]redislib.SlotRange, error) {
	ranges, err := s.client.Do(ctx, s.client.B().ClusterSlots().Build()).ToArray()
	if err != nil {
		return nil, fmt.Errorf("CLUSTER SLOTS: %w", err)
	}
	out := make([]redislib.SlotRange, 0, len(ranges))
	for _, r := range ranges {
		// start, end, then the master: ip, port, id.
		vs, err := r.ToArray()
		if err != nil || len(vs) < 3 {
			return nil, fmt.Errorf("CLUSTER SLOTS: a range of %d fields: %w", len(vs), err)
		}
		start, err1 := vs[0].AsInt64()
		end, err2 := vs[1].AsInt64()
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("CLUSTER SLOTS: a range's bounds: %w", err)
		}
		m, err := vs[2].ToArray()
		if err != nil || len(m) < 2 {
			return nil, fmt.Errorf("CLUSTER SLOTS: a master of %d fields: %w", len(m), err)
		}
		ip, _ := m[0].ToString()
		port, _ := m[1].AsInt64()
		out = append(out, redislib.SlotRange{Start: int(start), End: int(end), Addr: net.JoinHostPort(ip, strconv.FormatInt(port, 10))})
	}
	return out, nil
}

// checkNode checks one server.
func (s *Store) checkNode(ctx context.Context, n node) error {
	e, err := redislib.Bounded(ctx, func(ctx context.Context) (redislib.Eviction, error) {
		if err := s.usable(ctx, n.client); err != nil {
			return redislib.Eviction{}, err
		}
		return readEviction(ctx, n.client)
	})
	switch {
	case err != nil && misconfigured(err):
		return fmt.Errorf("rueidisstore: %s cannot be used: %w: %w", n.addr, driver.ErrMisconfigured, err)
	case err != nil:
		return fmt.Errorf("rueidisstore: check %s: %w", n.addr, err)
	}
	if err := e.Check(n.addr); err != nil {
		return fmt.Errorf("rueidisstore: %w", err)
	}
	return nil
}

// usable runs on the server c talks to what the store's decisions need:
// a connection, the Lua library, the lease script, a PUBLISH on the
// invalidation channel; and checks that the fleet keys of the policies
// joined hold sorted sets.
func (s *Store) usable(ctx context.Context, c rueidis.Client) error {
	b := c.B()
	if err := c.Do(ctx, b.Ping().Build()).Error(); err != nil {
		return fmt.Errorf("PING: %w", err)
	}
	if err := s.runLibrary(ctx, c); err != nil {
		return err
	}
	if err := c.Do(ctx, b.Eval().Script(redislib.LeaseScript.Source).Numkeys(0).Arg("").Build()).Error(); err != nil && !rueidis.IsRedisNil(err) {
		return fmt.Errorf("the lease script: %w", err)
	}
	if err := c.Do(ctx, b.Publish().Channel(s.channel).Message("").Build()).Error(); err != nil {
		return fmt.Errorf("PUBLISH %s: %w", s.channel, err)
	}
	for _, p := range s.fleet.Policies() {
		k := redislib.FleetKey(s.prefix, p.Name)
		typ, err := s.client.Do(ctx, b.Type().Key(k).Build()).ToString()
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
func (s *Store) runLibrary(ctx context.Context, c rueidis.Client) error {
	fcall := func() error {
		return c.Do(ctx, c.B().Fcall().Function(redislib.LogFunction).Numkeys(0).Arg("").Build()).Error()
	}
	err := fcall()
	if isRedis(err, redislib.NoFunction) {
		err = s.loadOn(ctx, c)
		if err == nil {
			err = fcall()
		} else if !isRedis(err, redislib.UnknownCommand) && !isRedis(err, redislib.NoPermission) {
			return fmt.Errorf("FUNCTION LOAD: %w", err)
		}
	}
	if isRedis(err, redislib.UnknownCommand) || isRedis(err, redislib.NoPermission) {
		// Decisions run it as a script where FCALL, or FUNCTION LOAD
		// (an ACL of "+@all -function"), is missing or not permitted.
		err = c.Do(ctx, c.B().Eval().Script(redislib.LogScript.Source).Numkeys(0).Arg("").Build()).Error()
	}
	if err != nil && !rueidis.IsRedisNil(err) {
		return fmt.Errorf("the Lua library: %w", err)
	}
	return nil
}

// isRedis reports whether err is an error answered by Redis whose message
// is of the class is.
func isRedis(err error, is func(msg string) bool) bool {
	var re *rueidis.RedisError
	return errors.As(err, &re) && !re.IsNil() && is(re.Error())
}

// misconfigured reports an error that no retry can change: the server
// refused the client's credentials, database or commands.
func misconfigured(err error) bool {
	return errors.Is(err, errWrongType) || isRedis(err, redislib.Misconfigured)
}

// readEviction reads the eviction settings with CONFIG GET, else with
// INFO memory.
func readEviction(ctx context.Context, c rueidis.Client) (redislib.Eviction, error) {
	cfg, cerr := c.Do(ctx, c.B().ConfigGet().Parameter("maxmemory*").Build()).AsStrMap()
	if cerr == nil {
		if e, ok := redislib.EvictionOfConfig(cfg); ok {
			return e, nil
		}
		cerr = errors.New("no maxmemory-policy in the answer")
	}
	if ctx.Err() != nil {
		return redislib.Eviction{}, ctx.Err()
	}
	info, ierr := c.Do(ctx, c.B().Info().Section("memory").Build()).ToString()
	if ierr != nil {
		return redislib.Eviction{}, fmt.Errorf("CONFIG GET maxmemory-policy: %w; INFO memory: %w", cerr, ierr)
	}
	e, ok := redislib.EvictionOfInfo(info)
	if !ok {
		return redislib.Eviction{}, fmt.Errorf("CONFIG GET maxmemory-policy: %w; INFO memory has no maxmemory_policy", cerr)
	}
	return e, nil
}
