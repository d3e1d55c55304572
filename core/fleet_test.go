package core_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/driver/drivertest"
	"github.com/ratekit/ratekit/internal/redistest"
	"github.com/ratekit/ratekit/internal/testkit"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/ratekit/ratekit/rueidisstore"
)

// instanceStore is a store of one app instance on a Redis, closable.
type instanceStore interface {
	core.Store
	Close()
}

// fleetDrivers make a store of an app instance on srv, one per driver:
// the fleet's announcements are the drivers' own, and both read each
// other's.
var fleetDrivers = []struct {
	name string
	new  func(t *testing.T, srv *redistest.Server) instanceStore
}{
	{"redisstore", func(t *testing.T, srv *redistest.Server) instanceStore {
		s := redisstore.New(srv.Client(t))
		t.Cleanup(s.Close)
		return s
	}},
	{"rueidisstore", func(t *testing.T, srv *redistest.Server) instanceStore {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		s := rueidisstore.New(c)
		t.Cleanup(s.Close) // before the client
		return s
	}},
}

// diffEvents records the EventRulesDiffer events a limiter reports.
type diffEvents struct {
	mu   sync.Mutex
	errs []error
}

func (d *diffEvents) Observe(_ context.Context, e core.Event) {
	if e.Kind == core.EventRulesDiffer {
		d.mu.Lock()
		d.errs = append(d.errs, e.Err)
		d.mu.Unlock()
	}
}

func (d *diffEvents) last() (error, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.errs) == 0 {
		return nil, 0
	}
	return d.errs[len(d.errs)-1], len(d.errs)
}

// TestFleetRulesDiffer: two instances that use one policy name with
// different rules (a 5 per second and a 20 per minute) are each told, at
// start by Limiter.Check and by an EventRulesDiffer event naming the other
// configuration, and told again when they agree (the other instance's
// store closed), after which Check passes.
func TestFleetRulesDiffer(t *testing.T) {
	for _, drv := range fleetDrivers {
		t.Run(drv.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			ctx := context.Background()
			var evA, evB diffEvents
			a := testkit.Limiter(t, drv.new(t, srv), core.Policy{Name: "login", Rules: []core.Rule{{Limit: 5, Window: time.Second}}},
				core.WithObserver(&evA))
			storeB := drv.new(t, srv)
			b := testkit.Limiter(t, storeB, core.Policy{Name: "login", Rules: []core.Rule{{Limit: 20, Window: time.Minute}}},
				core.WithObserver(&evB))
			same := testkit.Limiter(t, drv.new(t, srv), core.Policy{Name: "other", Rules: []core.Rule{{Limit: 5, Window: time.Second}}})
			_ = testkit.Limiter(t, drv.new(t, srv), core.Policy{Name: "other", Rules: []core.Rule{{Limit: 5, Window: time.Second}}})

			errA, errB := a.Check(ctx), b.Check(ctx)
			for name, err := range map[string]error{"a": errA, "b": errB} {
				if err == nil || errors.Is(err, core.ErrMisconfigured) || !strings.Contains(err.Error(), "other configuration") {
					t.Errorf("%s.Check() = %v, want an error naming the other configuration, not ErrMisconfigured", name, err)
				}
			}
			if err := same.Check(ctx); err != nil {
				t.Errorf("Check() of a policy every instance configures alike = %v, want nil", err)
			}
			for name, ev := range map[string]*diffEvents{"a": &evA, "b": &evB} {
				if err, n := ev.last(); err == nil || n == 0 {
					t.Errorf("%s: EventRulesDiffer %v (%d events), want one with an error", name, err, n)
				}
			}

			// B's instance goes: A hears that every instance agrees again.
			storeB.Close()
			testkit.WaitUntil(t, "A hears that the instances agree", func() bool {
				err, n := evA.last()
				return n >= 2 && err == nil
			})
			if err := a.Check(ctx); err != nil {
				t.Errorf("a.Check() once B closed = %v, want nil", err)
			}
		})
	}
}

// TestFleetKeepsLongestWindow: instances that use one policy name with
// different rules (a 5 per second beside a 20 per minute, as in a deploy
// that changes a window) do not trim away what the other counts: the
// instance of 20 a minute admits 20 in the minute, those the other
// admitted included, on both algorithms and drivers, while the other
// keeps its own 5 a second.
func TestFleetKeepsLongestWindow(t *testing.T) {
	for _, drv := range fleetDrivers {
		for _, algo := range []core.Algorithm{core.SlidingLog, core.SlidingBuckets} {
			t.Run(drv.name+"/"+algo.String(), func(t *testing.T) {
				t.Parallel()
				srv := redistest.Start(t)
				ctx := context.Background()
				clock := drivertest.NewClock(time.Unix(1_900_000_000, 0))
				fast := testkit.Limiter(t, drv.new(t, srv), core.Policy{Name: "deploy", Algorithm: algo, Buckets: 10,
					Rules: []core.Rule{{Limit: 5, Window: time.Second}}}, core.WithClock(clock.Now))
				slow := testkit.Limiter(t, drv.new(t, srv), core.Policy{Name: "deploy", Algorithm: algo, Buckets: 10,
					Rules: []core.Rule{{Limit: 20, Window: time.Minute}}}, core.WithClock(clock.Now))
				// Both have read each other's announcement.
				_, _ = fast.Check(ctx), slow.Check(ctx)

				admitted := 0
				for range 3 { // three seconds of the fast instance's limit
					for range 6 {
						if d, err := fast.Allow(ctx, "k"); err != nil {
							t.Fatal(err)
						} else if d.Allowed {
							admitted++
						}
					}
					clock.Add(1100 * time.Millisecond)
				}
				if admitted != 15 {
					t.Fatalf("the 5-per-second instance admitted %d in 3 seconds, want 15", admitted)
				}
				for range 10 {
					if d, err := slow.Allow(ctx, "k"); err != nil {
						t.Fatal(err)
					} else if d.Allowed {
						admitted++
					}
				}
				if admitted != 20 {
					t.Errorf("%d admitted within a minute between both instances, want 20 (the 20-per-minute rule holds)", admitted)
				}
			})
		}
	}
}

// TestFleetCloseWithdraws: a store closed (a configuration reload that
// builds a new one) withdraws its instance's announcements at once, so
// that the fleet counts one instance fewer from the next announcement on,
// not for as long as the process runs.
func TestFleetCloseWithdraws(t *testing.T) {
	for _, drv := range fleetDrivers {
		t.Run(drv.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			p := core.Policy{Name: "reload", Rules: []core.Rule{{Limit: 10, Window: time.Minute}}}
			keep := testkit.Limiter(t, drv.new(t, srv), p)
			var dropped []instanceStore
			for range 3 { // three reloads, each store closed
				s := drv.new(t, srv)
				testkit.Limiter(t, s, p)
				dropped = append(dropped, s)
			}
			testkit.WaitUntil(t, "4 instances counted", func() bool { return core.Instances(keep) == 4 })
			for _, s := range dropped {
				s.Close()
			}
			t.Logf("members: %v", srv.Do(t, "ZRANGE", "ratekit:reload:fleet", 0, -1))
			if n := srv.Do(t, "ZCARD", "ratekit:reload:fleet"); n != int64(1) {
				t.Errorf("fleet key holds %v announcements once the 3 stores closed, want 1", n)
			}
			testkit.WaitUntil(t, "1 instance counted", func() bool { return core.Instances(keep) == 1 })
		})
	}
}

// TestPruneLibraries: the first store of a release to load its function
// library into a Redis deletes the libraries of ratekit no live instance
// runs (an earlier release's), and keeps v0.1.0's while one of its
// instances announces itself, and another program's always.
func TestPruneLibraries(t *testing.T) {
	const (
		gone   = "ratekit_0123456789ab" // a release whose instances stopped
		legacy = "ratekit_2e60b0f5e3d1" // v0.1.0's, with an instance alive
		other  = "mylib"
	)
	for _, drv := range fleetDrivers {
		t.Run(drv.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			for _, lib := range []string{gone, legacy, other} {
				srv.Do(t, "FUNCTION", "LOAD", "#!lua name="+lib+"\nredis.register_function('"+lib+"_f', function() return 1 end)")
			}
			srv.Do(t, "ZADD", "app:login:fleet", time.Now().Add(time.Minute).UnixMilli(), "v010instance") // v0.1.0's announcement
			l := testkit.Limiter(t, drv.new(t, srv), core.Policy{Name: "p", Rules: []core.Rule{{Limit: 1, Window: time.Minute}}})
			if _, err := l.Allow(context.Background(), "k"); err != nil { // loads the library
				t.Fatal(err)
			}
			testkit.WaitUntil(t, "the unused library deleted", func() bool {
				return !strings.Contains(fmt.Sprint(srv.Do(t, "FUNCTION", "LIST")), gone)
			})
			list := fmt.Sprint(srv.Do(t, "FUNCTION", "LIST"))
			for _, lib := range []string{legacy, other} {
				if !strings.Contains(list, lib) {
					t.Errorf("FUNCTION LIST %s: %s deleted, want it kept", list, lib)
				}
			}
		})
	}
}
