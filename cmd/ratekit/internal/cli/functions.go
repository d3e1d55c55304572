package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/internal/redislib"
	"github.com/ratekit/ratekit/redisstore"
)

// functions lists the function libraries of ratekit on every master, and
// which a live instance runs; with -prune it deletes those none runs.
func functions(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs, c := newFlags("functions", stderr)
	prune := fs.Bool("prune", false, "delete the libraries no live instance runs")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("%w: functions takes no arguments", errUsage)
	}
	cn, ctx, done, err := c.open(ctx, getenv, stderr, *prune)
	if err != nil {
		return err
	}
	defer done()
	if *prune {
		deleted, err := redisstore.PruneLibraries(ctx, cn.rdb)
		for _, l := range deleted {
			fmt.Fprintf(stdout, "deleted %s\n", l)
		}
		if err != nil {
			return err
		}
		if len(deleted) == 0 {
			fmt.Fprintln(stdout, "no library to delete: every one is run by a live instance")
		}
		return nil
	}
	libs, members, err := listLibraries(ctx, cn.rdb)
	if err != nil {
		return err
	}
	printLibraries(stdout, libs, members)
	return nil
}

// listLibraries returns the function libraries of ratekit on every master
// of rdb, sorted, and the live announcements of their fleet keys.
func listLibraries(ctx context.Context, rdb redis.UniversalClient) (libs, members []string, err error) {
	var mu sync.Mutex
	list := func(ctx context.Context, node *redis.Client) error {
		ls, err := node.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: "ratekit_*"}).Result()
		if err != nil {
			return fmt.Errorf("FUNCTION LIST: %w", err)
		}
		now, err := node.Time(ctx).Result()
		if err != nil {
			return fmt.Errorf("TIME: %w", err)
		}
		var ms []string
		it := node.Scan(ctx, 0, redislib.FleetPattern, 1000).Iterator()
		for it.Next(ctx) {
			//nolint:staticcheck // ZRANGEBYSCORE runs on every Redis; ZRANGE BYSCORE needs 6.2
			live, err := node.ZRangeByScore(ctx, it.Val(), &redis.ZRangeBy{Min: strconv.FormatInt(now.UnixMilli(), 10), Max: "+inf"}).Result()
			if err == nil {
				ms = append(ms, live...)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for _, l := range ls {
			if !slices.Contains(libs, l.Name) {
				libs = append(libs, l.Name)
			}
		}
		members = append(members, ms...)
		return it.Err()
	}
	switch r := rdb.(type) {
	case *redis.ClusterClient:
		err = r.ForEachMaster(ctx, list)
	case *redis.Client:
		err = list(ctx, r)
	}
	slices.Sort(libs)
	return libs, members, err
}

// printLibraries writes a line per library: whose it is, and how many
// live announcements run it, or that none does.
func printLibraries(stdout io.Writer, libs, members []string) {
	unused := redislib.Unused(libs, members)
	runs := map[string]int{}
	for _, m := range members {
		runs[redislib.LibraryOf(m)]++
	}
	for _, l := range libs {
		switch {
		case l == redislib.LibName:
			fmt.Fprintf(stdout, "%s  this release's, run by %d live announcement(s)\n", l, runs[l])
		case slices.Contains(unused, l):
			fmt.Fprintf(stdout, "%s  run by no live instance (-prune deletes it)\n", l)
		case slices.Contains(redislib.LegacyLibraries, l):
			fmt.Fprintf(stdout, "%s  v0.1.0's, run by %d live announcement(s)\n", l, runs[l])
		default:
			fmt.Fprintf(stdout, "%s  run by %d live announcement(s)\n", l, runs[l])
		}
	}
	if len(libs) == 0 {
		fmt.Fprintln(stdout, "no library of ratekit is loaded")
	}
}
