package testkit

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
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

// ChallengeFleet checks on b a rule of Limit 5 and Challenge 3 on two
// instances sharing a store (on [Memory], the one limiter of a process).
// Requests 1 and 2 are admitted; then 8 goroutines × 4 requests over both
// instances are all challenged and record nothing; after a pass on one
// instance the same flood admits exactly 3 (the 3rd to 5th units) and
// denies every other one, none challenged; Reset on one instance clears
// the pass and the counts for both.
func ChallengeFleet(t *testing.T, b Backend) {
	const (
		goroutines = 8
		each       = 4
	)
	p := core.Policy{Name: "login-challenge", Rules: []core.Rule{{Limit: 5, Window: time.Hour, Challenge: 3}}}
	obs := &Events{}
	ls := Fleet(t, 2, b, p, core.WithObserver(obs))
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
		WaitUntil(t, "instance admits alice after Reset", func() bool {
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
}
