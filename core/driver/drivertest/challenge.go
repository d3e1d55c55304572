package drivertest

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
)

// pass records that key passed its challenge on l, failing t otherwise.
func pass(t *testing.T, l *core.Limiter, key string) {
	t.Helper()
	if err := l.Pass(ctx(t), key); err != nil {
		t.Fatalf("Pass(%q): %v", key, err)
	}
}

// wantChallenged fails t unless d is a challenge from the store: not
// admitted, not locked out, no RetryAfter, with used units in the
// policy's rule (-1: not checked).
func wantChallenged(t *testing.T, what string, d core.Decision, rule int, used int64) {
	t.Helper()
	if d.Allowed || !d.Challenged || d.Locked || d.RetryAfter != 0 || d.Source != core.SourceStore {
		t.Fatalf("%s = %s Challenged %v Locked %v, want challenged by the store, no RetryAfter", what, show(d), d.Challenged, d.Locked)
	}
	if rule < 0 {
		return
	}
	if got := d.Rules()[rule].Used; got != used {
		t.Fatalf("%s: Rules()[%d].Used = %d, want %d (a challenge records nothing)", what, rule, got, used)
	}
}

// testChallenge: with Limit 5 and Challenge 3, requests 1 and 2 are
// admitted, request 3 is challenged (and again, recording nothing); after
// a pass requests 3 to 5 are admitted and 6 is denied. A pass lasts the
// window from when it was given, and is the key's own. A Peek reports a
// challenge as a take would.
func testChallenge(t *testing.T, s *suite) {
	algorithms(t, func(t *testing.T, algo core.Algorithm) {
		clk := NewClock(lockoutStart)
		l, _ := s.policyLimiter(t, core.Policy{
			Rules:     []core.Rule{{Limit: 5, Window: time.Minute, Challenge: 3}},
			Algorithm: algo,
		}, core.WithClock(clk.Now))
		challengeWithoutPass(t, l)

		clk.Add(time.Second)
		pass(t, l, "k")
		challengeAfterPass(t, l, algo)

		// A pass on a fresh key lasts the window from when it was given:
		// units taken under it count on, but past its end the key is
		// challenged again at its third unit.
		challengePassEnds(t, l, clk)

		// Once k's units and pass are gone, its third unit is challenged
		// again.
		clk.Add(2 * time.Minute)
		for i := range 2 {
			if d := allow(t, l, "k"); !d.Allowed {
				t.Fatalf("Allow(k) #%d after the window = %s, want allowed", i+1, show(d))
			}
		}
		wantChallenged(t, "Allow(k) #3 after the pass ended", allow(t, l, "k"), 0, 2)
	})
}

// challengeWithoutPass is testChallenge before a pass, on l of Limit 5
// and Challenge 3: requests 1 and 2 of k are admitted, request 3 is
// challenged (and again, recording nothing), a Peek reports the challenge,
// and the key "other" is challenged at its own third unit.
func challengeWithoutPass(t *testing.T, l *core.Limiter) {
	t.Helper()
	for i, remaining := range []int64{4, 3} {
		if d := allow(t, l, "k"); !d.Allowed || d.Challenged || d.Remaining != remaining {
			t.Fatalf("Allow(k) #%d = %s Challenged %v, want allowed, Remaining %d", i+1, show(d), d.Challenged, remaining)
		}
	}
	for i := range 3 {
		d := allow(t, l, "k")
		wantChallenged(t, fmt.Sprintf("Allow(k) #3 without a pass, try %d", i+1), d, 0, 2)
		if d.Remaining != 3 || d.Limit != 5 || d.Rule != 0 {
			t.Fatalf("challenged Allow(k) = %s, want Rule 0, Limit 5, Remaining 3 (as before it)", show(d))
		}
	}
	wantChallenged(t, "Peek(k)", peek(t, l, "k"), 0, 2)
	if d := allowN(t, l, "other", 2); !d.Allowed {
		t.Fatalf("AllowN(other, 2) = %s, want allowed (2 < Challenge 3)", show(d))
	}
	wantChallenged(t, "Allow(other) reaching the Challenge", allow(t, l, "other"), 0, 2)
}

// challengeAfterPass is testChallenge once k passed: requests 3 to 5 are
// admitted and 6 is denied by the limit; "other" is still challenged.
func challengeAfterPass(t *testing.T, l *core.Limiter, algo core.Algorithm) {
	t.Helper()
	if d := peek(t, l, "k"); !d.Allowed || d.Challenged {
		t.Fatalf("Peek(k) after Pass = %s Challenged %v, want allowed", show(d), d.Challenged)
	}
	for i, remaining := range []int64{2, 1, 0} {
		if d := allow(t, l, "k"); !d.Allowed || d.Challenged || d.Remaining != remaining {
			t.Fatalf("Allow(k) #%d after Pass = %s Challenged %v, want allowed, Remaining %d", i+3, show(d), d.Challenged, remaining)
		}
	}
	d := allow(t, l, "k")
	if d.Allowed || d.Challenged || d.Locked || d.RetryAfter < 59*time.Second || d.RetryAfter > time.Minute {
		t.Fatalf("Allow(k) #6 after Pass = %s Challenged %v, want denied by the limit, RetryAfter 59s (60s in 1s buckets)", show(d), d.Challenged)
	}
	if algo == core.SlidingLog && d.RetryAfter != 59*time.Second {
		t.Fatalf("Allow(k) #6 after Pass = %s, want RetryAfter exactly 59s", show(d))
	}
	wantChallenged(t, "Allow(other) after k passed", allow(t, l, "other"), 0, 2)
}

// challengePassEnds is testChallenge's pass on the fresh key "w": it lasts
// the window from when it was given, and the units taken under it count
// on once it ends.
func challengePassEnds(t *testing.T, l *core.Limiter, clk *Clock) {
	t.Helper()
	pass(t, l, "w")
	clk.Add(30 * time.Second)
	for i := range 3 {
		if d := allow(t, l, "w"); !d.Allowed {
			t.Fatalf("Allow(w) #%d under a pass = %s, want allowed", i+1, show(d))
		}
	}
	clk.Add(30*time.Second - time.Microsecond)
	if d := peek(t, l, "w"); !d.Allowed || d.Rules()[0].Used != 3 {
		t.Fatalf("Peek(w) 1µs before the pass ends = %s, want allowed, Used 3", show(d))
	}
	clk.Add(time.Microsecond)
	wantChallenged(t, "Peek(w) when the pass ends", peek(t, l, "w"), 0, 3)
	wantChallenged(t, "Allow(w) when the pass ends", allow(t, l, "w"), 0, 3)
}

// testChallengeRules: a Challenge on one rule of several, the binding one
// or not, and on a calendar rule, whose pass lasts until its period ends.
func testChallengeRules(t *testing.T, s *suite) {
	algorithms(t, func(t *testing.T, algo core.Algorithm) {
		clk := NewClock(lockoutStart) // 12:00 UTC
		l, _ := s.policyLimiter(t, core.Policy{
			Rules: []core.Rule{
				{Limit: 2, Window: time.Second},
				{Limit: 10, Window: time.Hour, Challenge: 4},
				{Limit: 6, Calendar: core.Day, Challenge: 5},
			},
			Algorithm: algo,
		}, core.WithClock(clk.Now))
		for i := range 3 {
			if d := allow(t, l, "k"); !d.Allowed {
				t.Fatalf("Allow(k) #%d = %s, want allowed", i+1, show(d))
			}
			clk.Add(time.Second)
		}
		wantChallenged(t, "Allow(k) #4 reaching the hour's Challenge", allow(t, l, "k"), 1, 3)
		// A full rule denies rather than challenges.
		if d := allowN(t, l, "full", 2); !d.Allowed {
			t.Fatalf("AllowN(full, 2) = %s, want allowed", show(d))
		}
		if d := allow(t, l, "full"); d.Allowed || d.Challenged || d.RetryAfter <= 0 || d.RetryAfter > 2*time.Second {
			t.Fatalf("Allow(full) over 2 a second = %s Challenged %v, want denied, RetryAfter about 1s", show(d), d.Challenged)
		}

		pass(t, l, "k")
		if d := allow(t, l, "k"); !d.Allowed {
			t.Fatalf("Allow(k) #4 after Pass = %s, want allowed", show(d))
		}
		clk.Add(time.Second)
		if d := allow(t, l, "k"); !d.Allowed {
			t.Fatalf("Allow(k) #5 after Pass (the day's Challenge) = %s, want allowed", show(d))
		}
		// Past the hour the hourly units and the hour's worth of the pass
		// are gone, but the day's pass holds until midnight.
		clk.Add(2 * time.Hour)
		if d := allow(t, l, "k"); !d.Allowed || d.Rules()[2].Used != 6 {
			t.Fatalf("Allow(k) #6 two hours later = %s, want allowed by the day's pass, the day's Used 6", show(d))
		}
		clk.Set(time.Date(2024, 1, 11, 0, 0, 0, 0, time.UTC))
		for i := range 3 {
			if d := allow(t, l, "k"); !d.Allowed || d.Rules()[2].Used != int64(i+1) {
				t.Fatalf("Allow(k) #%d of the next day = %s, want allowed", i+1, show(d))
			}
			clk.Add(time.Second)
		}
		wantChallenged(t, "Allow(k) #4 of the next day, the pass gone", allow(t, l, "k"), 1, 3)
	})
}

// testChallengeLockout: a challenged request starts no lockout, however
// often it comes; after a pass, a denial by the limit does.
func testChallengeLockout(t *testing.T, s *suite) {
	clk := NewClock(lockoutStart)
	l, _ := s.policyLimiter(t, core.Policy{
		Rules:   []core.Rule{{Limit: 3, Window: time.Minute, Challenge: 1}},
		Lockout: core.Lockout{For: time.Hour},
	}, core.WithClock(clk.Now))
	for range 10 {
		wantChallenged(t, "Allow(k) with Challenge 1", allow(t, l, "k"), 0, 0)
	}
	pass(t, l, "k")
	for i := range 3 {
		if d := allow(t, l, "k"); !d.Allowed {
			t.Fatalf("Allow(k) #%d after Pass = %s, want allowed", i+1, show(d))
		}
	}
	if d := allow(t, l, "k"); !d.Locked || d.Challenged || d.RetryAfter != time.Hour {
		t.Fatalf("Allow(k) #4 after Pass = %s Locked %v, want locked out for an hour", show(d), d.Locked)
	}
	// Reset lifts the lockout and forgets the pass with the counts.
	if err := l.Reset(ctx(t), "k"); err != nil {
		t.Fatal(err)
	}
	wantChallenged(t, "Allow(k) after Reset", allow(t, l, "k"), 0, 0)
}

// testChallengeConcurrent: two instances on one store, Limit 40 and
// Challenge 10. Concurrent requests of a key without a pass: exactly 9
// are admitted and every other one is challenged, none denied, and the
// key holds 9 units. After a pass on one instance, concurrent requests
// on both admit exactly 31 more and deny the rest, none challenged.
// Reset on one instance clears the pass and the counts for both.
func testChallengeConcurrent(t *testing.T, s *suite) {
	const (
		limit      = 40
		challenge  = 10
		goroutines = 16
		each       = 6
	)
	st := s.store(t)
	p := core.Policy{Name: s.name(), Rules: []core.Rule{{Limit: limit, Window: time.Minute, Challenge: challenge}}}
	ls := instances(t, s, st, p, 2)
	var challenged, other atomic.Int64
	allowed := hammer(t, ls, goroutines, each, func(d core.Decision) {
		if d.Challenged && d.RetryAfter == 0 {
			challenged.Add(1)
		} else {
			other.Add(1)
			t.Errorf("Allow(k) without a pass = %s Challenged %v, want allowed or challenged", show(d), d.Challenged)
		}
	})
	if allowed != challenge-1 || challenged.Load() != goroutines*each-(challenge-1) {
		t.Fatalf("%d x %d Allow(k) with Challenge %d and no pass: %d allowed, %d challenged, %d other; want %d, %d, 0",
			goroutines, each, challenge, allowed, challenged.Load(), other.Load(), challenge-1, goroutines*each-(challenge-1))
	}
	for i, l := range ls {
		wantChallenged(t, fmt.Sprintf("Peek(k) on instance %d", i), peek(t, l, "k"), 0, challenge-1)
	}

	pass(t, ls[1], "k")
	challenged.Store(0)
	var denied atomic.Int64
	allowed = hammer(t, ls, goroutines, each, func(d core.Decision) {
		if d.Challenged {
			challenged.Add(1)
		} else {
			denied.Add(1)
		}
	})
	if allowed != limit-(challenge-1) || challenged.Load() != 0 || denied.Load() != goroutines*each-(limit-(challenge-1)) {
		t.Fatalf("%d x %d Allow(k) after Pass: %d allowed, %d challenged, %d denied; want %d, 0, %d",
			goroutines, each, allowed, challenged.Load(), denied.Load(), limit-(challenge-1), goroutines*each-(limit-(challenge-1)))
	}
	if err := ls[0].Reset(ctx(t), "k"); err != nil {
		t.Fatal(err)
	}
	for i, l := range ls {
		if d := peek(t, l, "k"); !d.Allowed || d.Rules()[0].Used != 0 {
			t.Errorf("Peek(k) on instance %d after Reset = %s, want allowed, Used 0", i, show(d))
		}
	}
	allowed = hammer(t, ls, goroutines, each, func(core.Decision) {})
	if allowed != challenge-1 {
		t.Errorf("Allow(k) after Reset: %d allowed, want %d: the pass went with the counts", allowed, challenge-1)
	}
}
