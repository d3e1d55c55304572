package redissuite

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

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
