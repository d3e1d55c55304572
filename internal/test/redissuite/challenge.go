package redissuite

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// outcomes counts what concurrent requests of one key got.
type outcomes struct{ allowed, challenged, denied, other atomic.Int64 }

// flood sends goroutines × each requests of key over the instances ls,
// from goroutines at once, and counts what they got.
func flood(t *testing.T, ls []*core.Limiter, key string, goroutines, each int) *outcomes {
	t.Helper()
	var o outcomes
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := range goroutines {
		wg.Go(func() {
			<-start
			for range each {
				d, err := ls[g%len(ls)].Allow(context.Background(), key)
				switch {
				case err != nil:
					t.Errorf("Allow(%q): %v", key, err)
				case d.Source.Fallback():
					t.Errorf("Allow(%q) = %+v, want a decision of the store", key, d)
				case d.Allowed && !d.Challenged:
					o.allowed.Add(1)
				case d.Challenged && !d.Allowed && d.RetryAfter == 0 && !d.Locked:
					o.challenged.Add(1)
				case !d.Allowed && !d.Challenged && d.RetryAfter > 0:
					o.denied.Add(1)
				default:
					o.other.Add(1)
					t.Errorf("Allow(%q) = %+v, want admitted, challenged or denied", key, d)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	return &o
}

// testChallengeFleet: Limit 5 and Challenge 3 on two instances sharing a
// store (Redis; core's TestChallengeFleet: on memory, the one limiter of
// a process). Requests 1 and
// 2 are admitted; then 8 goroutines × 4 requests over both instances are
// all challenged and record nothing; after a pass on one instance the same
// flood admits exactly 3 (the 3rd to 5th units) and denies every other
// one, none challenged; Reset on one instance clears the pass and the
// counts for both.
func testChallengeFleet(t *testing.T, drv Driver) {
	const (
		goroutines = 8
		each       = 4
	)
	p := core.Policy{Name: "login-challenge", Rules: []core.Rule{{Limit: 5, Window: time.Hour, Challenge: 3}}}
	for _, b := range []testkit.Backend{fleetBackend(drv)} {
		t.Run(b.Name, func(t *testing.T) {
			obs := &testkit.Events{}
			ls := testkit.Fleet(t, 2, b, p, core.WithObserver(obs))
			ctx := context.Background()
			for i := range 2 {
				if d, err := ls[i].Allow(ctx, "alice"); err != nil || !d.Allowed || d.Remaining != int64(4-i) {
					t.Fatalf("instance %d: Allow(alice) #%d = %+v, %v; want admitted, Remaining %d", i, i+1, d, err, 4-i)
				}
			}
			o := flood(t, ls, "alice", goroutines, each)
			if o.allowed.Load() != 0 || o.challenged.Load() != goroutines*each || o.denied.Load() != 0 {
				t.Fatalf("%d requests from the 3rd on, no pass: %d allowed, %d challenged, %d denied; want 0, %d, 0",
					goroutines*each, o.allowed.Load(), o.challenged.Load(), o.denied.Load(), goroutines*each)
			}
			for i, l := range ls {
				d, err := l.Peek(ctx, "alice")
				if err != nil || !d.Challenged || d.Rules()[0].Used != 2 {
					t.Fatalf("instance %d: Peek(alice) = %+v, %v; want challenged, Used 2: challenges record nothing", i, d, err)
				}
			}

			if err := ls[1].Pass(ctx, "alice"); err != nil {
				t.Fatalf("Pass(alice) on instance 1: %v", err)
			}
			o = flood(t, ls, "alice", goroutines, each)
			if o.allowed.Load() != 3 || o.challenged.Load() != 0 || o.denied.Load() != goroutines*each-3 {
				t.Fatalf("%d requests after a pass: %d allowed, %d challenged, %d denied; want 3, 0, %d",
					goroutines*each, o.allowed.Load(), o.challenged.Load(), o.denied.Load(), goroutines*each-3)
			}
			if n := obs.Count(core.EventPass); n != 1 {
				t.Errorf("observers saw %d EventPass, want 1", n)
			}
			challenges := 0
			for _, e := range obs.All() {
				if e.Kind == core.EventDecision && e.Decision.Challenged {
					challenges++
				}
			}
			if challenges != goroutines*each {
				t.Errorf("observers saw %d challenged decisions, want %d", challenges, goroutines*each)
			}

			if err := ls[0].Reset(ctx, "alice"); err != nil {
				t.Fatal(err)
			}
			// Every instance hears of the reset: its deny cache answers
			// the denials it holds until then, which record nothing.
			for i, l := range ls {
				testkit.WaitUntil(t, "instance admits alice after Reset", func() bool {
					d, err := l.Allow(ctx, "alice")
					if err != nil || d.Challenged || !d.Allowed && d.Source != core.SourceCache {
						t.Fatalf("instance %d: Allow(alice) after Reset = %+v, %v; want admitted, or denied from the deny cache", i, d, err)
					}
					return d.Allowed
				})
			}
			for i, l := range ls {
				if d, err := l.Allow(ctx, "alice"); err != nil || !d.Challenged {
					t.Fatalf("instance %d: Allow(alice) #3 after Reset = %+v, %v; want challenged: the pass went with the counts", i, d, err)
				}
			}
		})
	}
}

// testChallengeFailLocal: while Redis is down, the local fallback store
// challenges too, from the admissions and the pass it mirrored.
func testChallengeFailLocal(t *testing.T, drv Driver) {
	srv := redistest.Start(t)
	l := testkit.Limiter(t, drv.New(t, srv),
		core.Policy{Name: "fl-challenge", Rules: []core.Rule{{Limit: 5, Window: time.Hour, Challenge: 3}}},
		core.WithTimeout(time.Second), core.WithBreaker(0, 0), core.WithDenyCache(0))
	ctx := context.Background()
	for _, key := range []string{"passed", "passed", "other", "other"} {
		if d, err := l.Allow(ctx, key); err != nil || !d.Allowed || d.Source != core.SourceStore {
			t.Fatalf("Allow(%s) = %+v, %v; want admitted by Redis", key, d, err)
		}
	}
	if err := l.Pass(ctx, "passed"); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	if d, _ := l.Allow(ctx, "other"); d.Allowed || !d.Challenged || d.Source != core.SourceLocal {
		t.Errorf("Allow(other) #3 with Redis down = %+v, want challenged by the local store", d)
	}
	for i := range 3 {
		if d, _ := l.Allow(ctx, "passed"); !d.Allowed || d.Source != core.SourceLocal {
			t.Fatalf("Allow(passed) #%d with Redis down = %+v, want admitted by the local store, which mirrored the pass", i+3, d)
		}
	}
	if d, _ := l.Allow(ctx, "passed"); d.Allowed || d.Challenged || d.Source != core.SourceLocal {
		t.Errorf("Allow(passed) #6 with Redis down = %+v, want denied by the local store", d)
	}
	// A pass the store cannot record is an error, and holds locally.
	err := l.Pass(ctx, "other")
	if err == nil || !strings.Contains(err.Error(), "fl-challenge") {
		t.Errorf("Pass(other) with Redis down = %v, want an error naming the policy", err)
	}
	if d, _ := l.Allow(ctx, "other"); !d.Allowed || d.Source != core.SourceLocal {
		t.Errorf("Allow(other) after a local pass = %+v, want admitted by the local store", d)
	}
}

// testChallengeResetReachesFallback: a pass that instance B recorded (and
// mirrored in its fallback store) is forgotten there when instance A
// resets the key, with the rest of B's fallback window of the key, so
// that B's fallback challenges again while Redis is down once the key
// reaches the challenge afresh.
func testChallengeResetReachesFallback(t *testing.T, drv Driver) {
	srv := redistest.Start(t)
	p := core.Policy{Name: "fl-challenge-reset", Rules: []core.Rule{{Limit: 5, Window: time.Hour, Challenge: 3}}}
	opts := []core.Option{core.WithTimeout(time.Second), core.WithBreaker(0, 0), core.WithLocalShare(false)}
	a := testkit.Limiter(t, drv.New(t, srv), p, opts...)
	b := testkit.Limiter(t, drv.New(t, srv), p, opts...)
	ctx := context.Background()
	// x: two units and a pass through B. y: a denial B caches, to see
	// when B has heard of the resets (they come in order).
	for _, key := range []string{"x", "x", "y", "y"} {
		if d, err := b.Allow(ctx, key); err != nil || !d.Allowed || d.Source != core.SourceStore {
			t.Fatalf("B: Allow(%s) = %+v, %v; want admitted by Redis", key, d, err)
		}
	}
	for _, key := range []string{"x", "y"} {
		if err := b.Pass(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		if d, _ := b.Allow(ctx, "y"); !d.Allowed {
			t.Fatalf("B: Allow(y) after its pass = %+v, want admitted", d)
		}
	}
	testkit.WaitUntil(t, "B answers y from its deny cache", func() bool {
		d, _ := b.Allow(ctx, "y")
		return d.Source == core.SourceCache
	})
	for _, key := range []string{"x", "y"} {
		if err := a.Reset(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitUntil(t, "B hears of the resets", func() bool {
		d, _ := b.Peek(ctx, "y")
		if !d.Allowed {
			return false
		}
		d, _ = b.Allow(ctx, "y")
		return d.Source == core.SourceStore
	})
	srv.Stop()
	// The reset cleared B's fallback window of x, its pass with it: the
	// fallback admits 2 afresh, and challenges the 3rd (not passed).
	for i := range 3 {
		d, _ := b.Allow(ctx, "x")
		if want := i < 2; d.Allowed != want || d.Challenged == want || d.Source != core.SourceLocal {
			t.Errorf("B: Allow(x) #%d with Redis down after A reset it = %+v; want admitted %v, challenged %v, by the local store", i+1, d, want, !want)
		}
	}
}
