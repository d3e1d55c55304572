package rueidisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/ratekit/ratekit/internal/redislib"
)

// pruned makes the store delete, once and in the background after it
// loaded its own, the function libraries of ratekit that no live
// instance runs, on every master, as redisstore.PruneLibraries does.
func (s *Store) pruned() {
	s.prune.Do(func() {
		s.start(func() {
			ctx, cancel := context.WithTimeout(s.life, 10*time.Second)
			defer cancel()
			nodes, err := s.masters(ctx)
			if err != nil {
				return // best effort: the next release prunes again
			}
			for _, n := range nodes {
				_ = pruneOn(ctx, n.client)
			}
		})
	})
}

// pruneOn deletes the libraries of the server c talks to that FUNCTION
// LIST names and no live member of its fleet keys runs.
func pruneOn(ctx context.Context, c rueidis.Client) error {
	b := c.B()
	libs, err := c.Do(ctx, b.FunctionList().Libraryname("ratekit_*").Build()).ToArray()
	if err != nil {
		return fmt.Errorf("FUNCTION LIST: %w", err)
	}
	var names []string
	for _, l := range libs {
		// The library's entry holds arrays too: read its name alone.
		if m, err := l.AsMap(); err == nil {
			if v, ok := m["library_name"]; ok {
				if n, err := v.ToString(); err == nil {
					names = append(names, n)
				}
			}
		}
	}
	now, err := c.Do(ctx, b.Time().Build()).AsIntSlice()
	if err != nil || len(now) != 2 {
		return fmt.Errorf("TIME: %w", err)
	}
	ms := strconv.FormatInt(now[0]*1000+now[1]/1000, 10)
	var members []string
	var cursor uint64
	for {
		e, err := c.Do(ctx, b.Scan().Cursor(cursor).Match(redislib.FleetPattern).Count(1000).Build()).AsScanEntry()
		if err != nil {
			return fmt.Errorf("SCAN: %w", err)
		}
		for _, k := range e.Elements {
			live, err := c.Do(ctx, b.Zrangebyscore().Key(k).Min(ms).Max("+inf").Build()).AsStrSlice()
			if err == nil {
				members = append(members, live...)
			}
		}
		if cursor = e.Cursor; cursor == 0 {
			break
		}
	}
	for _, l := range redislib.Unused(names, members) {
		if err := c.Do(ctx, b.FunctionDelete().LibraryName(l).Build()).Error(); err != nil {
			return fmt.Errorf("FUNCTION DELETE %s: %w", l, err)
		}
	}
	return nil
}
