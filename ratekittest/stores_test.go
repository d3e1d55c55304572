package ratekittest_test

import (
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/ratekittest"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/ratekit/ratekit/rueidisstore"
)

// driver is a Redis store of production, on a redis-server of its own.
type driver struct {
	name  string
	store func(t *testing.T) core.Store
}

func drivers() []driver {
	return []driver{
		{"redisstore", func(t *testing.T) core.Store {
			return redisstore.New(redistest.Start(t).Client(t))
		}},
		{"rueidisstore", func(t *testing.T) core.Store {
			client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redistest.Start(t).Addr()}})
			if err != nil {
				t.Fatalf("rueidis.NewClient: %v", err)
			}
			t.Cleanup(client.Close)
			s := rueidisstore.New(client)
			t.Cleanup(s.Close) // before the client
			return s
		}},
	}
}

// TestKitDecidesAsRedis runs every scenario on the kit and, at the same
// clock's times (core.WithClock), on each Redis driver, and checks that
// every step decides alike, to the microsecond: what passes in an app's
// tests on the kit is what the app does in production on Redis. The
// limiters on Redis run as in production (deny cache, breaker) but for a
// timeout generous enough for a busy machine and FailClosed, so that a
// decision is never a silent local fallback.
func TestKitDecidesAsRedis(t *testing.T) {
	for _, drv := range drivers() {
		t.Run(drv.name, func(t *testing.T) {
			store := drv.store(t)
			for _, s := range scenarios() {
				t.Run(s.name, func(t *testing.T) {
					kl, kclock := ratekittest.NewLimiter(t, s.policy)
					kit := play(t, s, kl, kclock)

					clock := ratekittest.NewClock()
					l, err := core.NewLimiter(store, s.policy, core.WithClock(clock.Now),
						core.WithTimeout(2*time.Second), core.WithFailurePolicy(core.FailClosed))
					if err != nil {
						t.Fatal(err)
					}
					got := play(t, s, l, clock)
					for i := range s.steps {
						if got[i] != kit[i] {
							t.Errorf("step %d at %v: %s on %s, %s on the kit", i, got[i].at, got[i].summary, drv.name, kit[i].summary)
						}
					}
				})
			}
		})
	}
}
