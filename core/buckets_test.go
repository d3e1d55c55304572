package core_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// TestSlidingBucketsPrecision drives random traffic through a
// SlidingBuckets limiter on a stepped clock and checks every decision
// against the admissions it made: no window ever holds more than the
// limit, and a denial happens only when the true sliding count plus the
// part of the oldest bucket outside the window leaves no room, so it
// under-admits by at most one bucket.
func TestSlidingBucketsPrecision(t *testing.T) {
	const (
		limit   = 50
		window  = 10 * time.Second
		buckets = 10
	)
	g := window / buckets
	clock := newTestClock()
	l, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{
		Name:      "quota",
		Algorithm: core.SlidingBuckets,
		Buckets:   buckets,
		Rules:     []core.Rule{{Limit: limit, Window: window}},
	}, core.WithDenyCache(0), core.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	type adm struct {
		at time.Time
		n  int64
	}
	var admitted []adm
	count := func(from, to time.Time, inclusiveFrom bool) int64 {
		var c int64
		for _, a := range admitted {
			if (a.at.After(from) || inclusiveFrom && a.at.Equal(from)) && !a.at.After(to) {
				c += a.n
			}
		}
		return c
	}
	ctx := context.Background()
	denied := 0
	for i := range 5000 {
		clock.Add(time.Duration(rng.IntN(60)) * time.Millisecond)
		now := clock.Now()
		n := int64(1 + rng.IntN(3))
		d, err := l.AllowN(ctx, "k", n)
		if err != nil {
			t.Fatal(err)
		}
		start := now.Add(-window)
		trueCount := count(start, now, false)
		bucketStart := time.UnixMicro(start.UnixMicro() / g.Microseconds() * g.Microseconds())
		extra := count(bucketStart, start, true)
		if d.Allowed {
			admitted = append(admitted, adm{now, n})
			if got := trueCount + n; got > limit {
				t.Fatalf("step %d: admitted %d units with %d already in the window: %d > limit %d", i, n, trueCount, got, limit)
			}
			if trueCount+extra+n > limit {
				t.Fatalf("step %d: admitted although buckets held %d+%d", i, trueCount, extra)
			}
		} else {
			denied++
			if trueCount+extra+n <= limit {
				t.Fatalf("step %d: denied %d units with %d in the window and %d in the oldest bucket's outside part: under-admits more than one bucket", i, n, trueCount, extra)
			}
			if d.RetryAfter <= 0 || d.RetryAfter > window+g {
				t.Fatalf("step %d: RetryAfter %v outside (0, window+bucket]", i, d.RetryAfter)
			}
		}
	}
	if denied == 0 {
		t.Fatal("traffic never hit the limit; the test proves nothing")
	}
}

// TestSlidingBucketsRetryAfter checks that a denial's RetryAfter is the
// moment the request fits: denied just before, admitted at it.
func TestSlidingBucketsRetryAfter(t *testing.T) {
	clock := newTestClock()
	l, err := core.NewLimiter(core.NewMemoryStore(), core.Policy{
		Name:      "quota",
		Algorithm: core.SlidingBuckets,
		Buckets:   4,
		Rules:     []core.Rule{{Limit: 2, Window: 4 * time.Second}},
	}, core.WithDenyCache(0), core.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	clock.Add(500 * time.Millisecond) // mid-bucket
	for range 2 {
		if d, _ := l.Allow(ctx, "k"); !d.Allowed {
			t.Fatalf("first requests denied: %+v", d)
		}
	}
	d, _ := l.Allow(ctx, "k")
	if d.Allowed {
		t.Fatal("third request admitted over limit 2")
	}
	// The bucket [0s,1s) stops counting when the window starts at 1s, that
	// is at 5s: 4.5 s after the denial.
	if want := 4500 * time.Millisecond; d.RetryAfter != want {
		t.Fatalf("RetryAfter = %v, want %v", d.RetryAfter, want)
	}
	clock.Add(d.RetryAfter - time.Microsecond)
	if d, _ := l.Allow(ctx, "k"); d.Allowed {
		t.Fatal("admitted 1 µs before RetryAfter")
	}
	clock.Add(time.Microsecond)
	if d, _ := l.Allow(ctx, "k"); !d.Allowed {
		t.Fatalf("denied at RetryAfter: %+v", d)
	}
}

// TestSlidingBucketsRetryAfterBound: under SlidingBuckets a denial waits
// up to one bucket width longer than the window, never more. With 60
// buckets of a 60 s window, a unit admitted at the start of a bucket
// counts until that whole bucket has left the window: 61 s later. A
// denial then says 61 s (Retry-After: 61), the request is denied 1 µs
// before and admitted at it; in the middle of the bucket the wait is
// shorter. On the memory store (Redis: internal/test/redissuite's
// SlidingBucketsRetryAfterBound).
func TestSlidingBucketsRetryAfterBound(t *testing.T) {
	testkit.SlidingBucketsRetryAfterBound(t, testkit.Memory)
}
