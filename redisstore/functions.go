package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/internal/redislib"
)

// PruneLibraries deletes from the servers of client (every master of a
// Cluster) the function libraries of ratekit that no live instance runs:
// those of earlier releases whose instances have all stopped. Each
// release loads a library of its own (about 100 KB), named by a hash of
// its Lua; an instance announces the one it runs with its announcement of
// each policy it uses (v0.1.0's instances, which announce no library,
// keep v0.1.0's while any of them announces itself). Another program's
// libraries are left alone. It returns the names deleted.
//
// A store prunes once by itself, when it has loaded its own library into
// a server that lacked it (the first instance of a release); `ratekit
// functions -prune` does it on demand (docs/upgrading.md). An instance
// that runs a deleted library after all, one that announces no policy,
// loads it again at its next call, which it makes once more: no decision
// is lost.
func PruneLibraries(ctx context.Context, client redis.UniversalClient) ([]string, error) {
	var (
		mu      sync.Mutex
		deleted []string
	)
	prune := func(ctx context.Context, c *redis.Client) error {
		d, err := pruneOn(ctx, c)
		mu.Lock()
		deleted = append(deleted, d...)
		mu.Unlock()
		return err
	}
	var err error
	switch c := client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, prune)
	case *redis.Client:
		err = prune(ctx, c)
	default:
		return nil, fmt.Errorf("redisstore: prune libraries: a %T: want a *redis.Client or *redis.ClusterClient", client)
	}
	if err != nil {
		return deleted, fmt.Errorf("redisstore: prune libraries: %w", err)
	}
	return deleted, nil
}

// pruneOn prunes the libraries of one server: those FUNCTION LIST names
// that no live member of its fleet keys runs.
func pruneOn(ctx context.Context, c *redis.Client) ([]string, error) {
	libs, err := c.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: "ratekit_*"}).Result()
	if err != nil {
		return nil, fmt.Errorf("FUNCTION LIST: %w", err)
	}
	names := make([]string, len(libs))
	for i, l := range libs {
		names[i] = l.Name
	}
	now, err := c.Time(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("TIME: %w", err)
	}
	var members []string
	it := c.Scan(ctx, 0, redislib.FleetPattern, 1000).Iterator()
	for it.Next(ctx) {
		//nolint:staticcheck // ZRANGEBYSCORE runs on every Redis; ZRANGE BYSCORE needs 6.2
		live, err := c.ZRangeByScore(ctx, it.Val(), &redis.ZRangeBy{Min: strconv.FormatInt(now.UnixMilli(), 10), Max: "+inf"}).Result()
		if err != nil && !isWrongType(err) {
			return nil, fmt.Errorf("ZRANGEBYSCORE %s: %w", it.Val(), err)
		}
		members = append(members, live...)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("SCAN: %w", err)
	}
	var deleted []string
	for _, l := range redislib.Unused(names, members) {
		if err := c.FunctionDelete(ctx, l).Err(); err != nil && !errors.Is(err, redis.Nil) {
			return deleted, fmt.Errorf("FUNCTION DELETE %s: %w", l, err)
		}
		deleted = append(deleted, l)
	}
	return deleted, nil
}

// isWrongType reports a key of another type than the command's.
func isWrongType(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && redislib.WrongType(err.Error())
}

// pruned makes the store prune the libraries once, in the background,
// after it loaded its own.
func (s *Store) pruned() {
	s.prune.Do(func() {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, _ = PruneLibraries(ctx, s.client) // best effort: the next release prunes again
		}()
	})
}
