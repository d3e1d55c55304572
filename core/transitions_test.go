package core_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redistest"
	"github.com/ratekit/ratekit/internal/testkit"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/ratekit/ratekit/rueidisstore"
)

// viaDrivers make a store of an app instance that talks to Redis at addr
// (a proxy's, for faults), one per driver.
var viaDrivers = []struct {
	name string
	new  func(t *testing.T, addr string) core.Store
}{
	{"redisstore", func(t *testing.T, addr string) core.Store {
		rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		s := redisstore.New(rdb)
		t.Cleanup(s.Close) // before the client
		return s
	}},
	{"rueidisstore", func(t *testing.T, addr string) core.Store {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableRetry: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		s := rueidisstore.New(c)
		t.Cleanup(s.Close)
		return s
	}},
}

// untilStore decides key on l until the store decides, within 10 s, and
// returns how many of those decisions admitted.
func untilStore(t *testing.T, l *core.Limiter, key string) int {
	t.Helper()
	admitted := 0
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		d, err := l.Allow(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		}
		if d.Source == core.SourceStore || d.Source == core.SourceCache {
			return admitted
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store decides nothing 10 s after it answers again (last: %+v)", d)
		}
	}
}

// TestOutageEndCounts: a fleet of one is exact through an outage and its
// end: 3 admitted by Redis, a network outage during which the local
// fallback admits the 2 left, and once Redis answers again nothing more
// in the window (7 of 5 before), on both algorithms and drivers; under
// FailOpen, what was admitted during the outage counts once Redis
// answers, so the end of the outage hands out no fresh limit.
func TestOutageEndCounts(t *testing.T) {
	for _, drv := range viaDrivers {
		for _, algo := range []core.Algorithm{core.SlidingLog, core.SlidingBuckets} {
			for _, fp := range []core.FailurePolicy{core.FailLocal, core.FailOpen} {
				t.Run(drv.name+"/"+algo.String()+"/"+fp.String(), func(t *testing.T) {
					t.Parallel()
					srv := redistest.Start(t)
					proxy := redistest.NewProxy(t, srv.Addr())
					l := testkit.Limiter(t, drv.new(t, proxy.Addr()), core.Policy{Name: "blip", Algorithm: algo,
						Rules: []core.Rule{{Limit: 5, Window: time.Minute}}},
						core.WithFailurePolicy(fp), core.WithTimeout(200*time.Millisecond), core.WithBreaker(2, 200*time.Millisecond))
					ctx := context.Background()
					admitted := 0
					for range 3 {
						if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed || d.Source != core.SourceStore {
							t.Fatalf("Allow before the outage = %+v, %v; want admitted by the store", d, err)
						}
						admitted++
					}
					proxy.SetDropping(true)
					during := 0
					for range 4 {
						d, err := l.Allow(ctx, "k")
						if err != nil || !d.Source.Fallback() {
							t.Fatalf("Allow during the outage = %+v, %v; want a fallback", d, err)
						}
						if d.Allowed {
							during++
						}
					}
					if want := map[core.FailurePolicy]int{core.FailLocal: 2, core.FailOpen: 4}[fp]; during != want {
						t.Errorf("%d admitted during the outage, want %d", during, want)
					}
					admitted += during
					proxy.SetDropping(false)
					// Until the breaker lets a call through, the failure
					// policy decides: FailLocal from the full local window,
					// FailOpen admitting; once the store decides, it counts
					// all of it.
					recovering := untilStore(t, l, "k")
					if fp == core.FailLocal && recovering != 0 {
						t.Errorf("%d admitted by the local fallback as Redis came back, want 0 (its window is full)", recovering)
					}
					after := 0
					for range 5 {
						if d, err := l.Allow(ctx, "k"); err != nil {
							t.Fatal(err)
						} else if d.Allowed {
							after++
						}
					}
					if after != 0 {
						t.Errorf("%d admitted by Redis once it answers again, want 0: what was admitted without it counts", after)
					}
					if total := admitted + recovering + after; fp == core.FailLocal && total != 5 {
						t.Errorf("%d admitted in the minute, want 5", total)
					}
				})
			}
		}
	}
}

// TestLateRepliesCount: replies that come after the timeout (Redis ran
// the calls it was sent, the fallback decided them all meanwhile) do not
// add to the limit once replies come on time again: a fleet of one admits
// at most 5 of 5 (6 before, 8 with six late calls). What the fallback
// admitted counts once Redis answers, so that a call Redis ran too counts
// twice: the outcome of a call without a reply is unknown, and counting
// it can only under-admit.
func TestLateRepliesCount(t *testing.T) {
	for _, drv := range viaDrivers {
		for _, late := range []int{3, 6} {
			t.Run(fmt.Sprintf("%s/%d late", drv.name, late), func(t *testing.T) {
				t.Parallel()
				srv := redistest.Start(t)
				proxy := redistest.NewProxy(t, srv.Addr())
				l := testkit.Limiter(t, drv.new(t, proxy.Addr()), core.Policy{Name: "late", Rules: []core.Rule{{Limit: 5, Window: time.Minute}}},
					core.WithTimeout(100*time.Millisecond), core.WithBreaker(0, 0))
				ctx := context.Background()
				admitted := 0
				proxy.SetLatency(400 * time.Millisecond) // replies late: Redis runs the calls it is sent
				for range late {
					if d, _ := l.Allow(ctx, "k"); d.Allowed {
						admitted++
					}
				}
				proxy.SetLatency(0)
				time.Sleep(600 * time.Millisecond) // the late replies are in
				for range 8 {
					d, err := l.Allow(ctx, "k")
					if err != nil {
						t.Fatal(err)
					}
					if d.Allowed {
						admitted++
					}
				}
				if admitted > 5 {
					t.Errorf("%d admitted in the minute, want at most 5", admitted)
				}
			})
		}
	}
}
