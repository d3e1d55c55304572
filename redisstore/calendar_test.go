package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/core/driver/drivertest"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/redisstore"
)

// TestRedisCalendarClientClockOff: when the server's clock decides, the
// period is the one that holds the server's time, even when this
// process's clock (from which the periods are computed) is seconds off
// across midnight: the midnight is exact to the server's clock.
func TestRedisCalendarClientClockOff(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	for _, off := range []time.Duration{3 * time.Second, -3 * time.Second} {
		t.Run(fmt.Sprintf("off by %v", off), func(t *testing.T) {
			store := redisstore.New(rdb)
			redisstore.SetWall(store, func() time.Time { return time.Now().Add(off) })
			// Midnight 1.5 to 2.5 s away by the server's clock (this
			// machine's): the client believes otherwise for some seconds.
			midnight := time.Now().Truncate(time.Second).Add(2 * time.Second)
			q := driver.Query{Policy: "off" + fmt.Sprint(int(off.Seconds())), Key: "k", N: 1,
				Rules: []driver.Rule{{Limit: 1, Calendar: driver.Day, Location: drivertest.ZoneWithMidnightAt(midnight)}}}
			ctx := context.Background()
			var last driver.Result
			for {
				r, err := store.Take(ctx, q)
				if err != nil {
					t.Fatal(err)
				}
				at := time.UnixMicro(r.At)
				end := midnight
				if !at.Before(midnight) {
					end = midnight.Add(24 * time.Hour)
				}
				wantAllowed := last.At == 0 || last.At < midnight.UnixMicro() && !at.Before(midnight)
				s := r.Rules.All()[0]
				if r.Allowed != wantAllowed || s.ResetAfter != end.Sub(at) || !r.Allowed && s.RetryAfter != end.Sub(at) {
					t.Fatalf("Take at %v (midnight %v) = %+v, want Allowed %v and the period ending at %v by the server's clock",
						at, midnight, r, wantAllowed, end)
				}
				if r.Allowed {
					last = r
				}
				if !at.Before(midnight.Add(200 * time.Millisecond)) {
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}
