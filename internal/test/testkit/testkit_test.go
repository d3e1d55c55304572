package testkit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/keyfunc"
)

// fatalTB is a testing.TB whose Fatalf records the message and ends the
// goroutine, as testing.T's does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// fatalOf runs f with a fatalTB over t and returns what it failed with,
// "" when it did not.
func fatalOf(t *testing.T, f func(tb testing.TB)) string {
	tb := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(tb)
	}()
	<-done
	return tb.msg
}

func TestLimiter(t *testing.T) {
	ctx := context.Background()
	var ev testkit.Events
	l := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("login", testkit.PerHour(2), testkit.PerMinute(1)), core.WithObserver(&ev))
	if got := l.Policy(); got.Name != "login" || len(got.Rules) != 2 || got.Rules[0] != testkit.PerHour(2) || got.Rules[1] != testkit.PerMinute(1) {
		t.Errorf("Policy() = %+v, want login of 2 an hour and 1 a minute", got)
	}
	for i := range 2 {
		if d, err := l.Allow(ctx, "k"); err != nil || d.Allowed != (i == 0) {
			t.Errorf("Allow #%d = %+v, %v; want allowed the first time only (1 a minute)", i+1, d, err)
		}
	}
	if got := ev.Count(core.EventDecision); got != 2 {
		t.Errorf("the observer given as an option saw %d decisions, want 2", got)
	}

	msg := fatalOf(t, func(tb testing.TB) { testkit.Limiter(tb, core.NewMemoryStore(), testkit.Policy("empty")) })
	if !strings.Contains(msg, `core.NewLimiter("empty")`) {
		t.Errorf("Limiter of a policy without rules failed with %q, want core.NewLimiter's error", msg)
	}
}

// TestFleet: on every backend the n instances share one limit; on the
// memory backend they are one limiter, elsewhere one each.
func TestFleet(t *testing.T) {
	const n, limit = 3, 4
	for _, b := range testkit.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			ls := testkit.Fleet(t, n, b, testkit.Policy("fleet", testkit.PerHour(limit)))
			if len(ls) != n {
				t.Fatalf("Fleet(%d) has %d instances", n, len(ls))
			}
			distinct := map[*core.Limiter]bool{}
			for _, l := range ls {
				distinct[l] = true
			}
			if want := map[bool]int{true: 1, false: n}[b.Name == testkit.Memory.Name]; len(distinct) != want {
				t.Errorf("%d distinct limiters, want %d", len(distinct), want)
			}
			ctx := context.Background()
			for i := range limit + n {
				d, err := ls[i%n].Allow(ctx, "k")
				if err != nil || d.Allowed != (i < limit) || d.Source != core.SourceStore && d.Source != core.SourceCache {
					t.Errorf("instance %d: Allow #%d = %+v, %v; want Allowed=%v, by the store", i%n, i+1, d, err, i < limit)
				}
			}
		})
	}
}

func TestFleetOptions(t *testing.T) {
	var ev testkit.Events
	ls := testkit.Fleet(t, 2, testkit.Memory, testkit.Policy("opts", testkit.PerHour(1)), core.WithObserver(&ev))
	for i := range 2 {
		if d, err := ls[i].Allow(context.Background(), "k"); err != nil || d.Allowed != (i == 0) {
			t.Errorf("instance %d: Allow = %+v, %v; want allowed on the first only", i, d, err)
		}
	}
	if got := ev.Denials(); got != 1 {
		t.Errorf("the observer given as an option saw %d denials, want 1", got)
	}
	msg := fatalOf(t, func(tb testing.TB) { testkit.Fleet(tb, 0, testkit.Memory, testkit.Policy("none", testkit.PerHour(1))) })
	if !strings.Contains(msg, "0 instances") {
		t.Errorf("Fleet of 0 failed with %q, want a message naming 0 instances", msg)
	}
}

func TestEvents(t *testing.T) {
	var r testkit.Events
	obs := core.Observer(&r)
	ctx := context.Background()
	for _, e := range []core.Event{
		{Kind: core.EventDecision, Decision: core.Decision{Allowed: true}},
		{Kind: core.EventDecision},
		{Kind: guard.EventSkip},
		{Kind: core.EventDecision},
	} {
		obs.Observe(ctx, e)
	}
	if got := r.Count(core.EventDecision); got != 3 {
		t.Errorf("Count(EventDecision) = %d, want 3", got)
	}
	if got := r.Denials(); got != 2 {
		t.Errorf("Denials() = %d, want 2", got)
	}
	all := r.All()
	if len(all) != 4 || all[2].Kind != guard.EventSkip {
		t.Fatalf("All() = %+v, want the 4 events in order", all)
	}
	all[0].Kind = guard.EventSkip
	if got := r.Count(guard.EventSkip); got != 1 {
		t.Errorf("after changing All's result, Count(EventSkip) = %d, want 1: All returns a copy", got)
	}
}

func TestEventCounts(t *testing.T) {
	var c testkit.EventCounts
	obs := core.Observer(&c)
	ctx := context.Background()
	down := errors.New("down")
	for _, e := range []core.Event{
		{Kind: core.EventDecision, Decision: core.Decision{Source: core.SourceStore}},
		{Kind: core.EventStoreError, Err: down},
		{Kind: core.EventDecision, Decision: core.Decision{Source: core.SourceLocal}},
		{Kind: core.EventDecision, Decision: core.Decision{Source: core.SourceCache}},
	} {
		obs.Observe(ctx, e)
	}
	if got := c.Count(core.EventDecision); got != 3 {
		t.Errorf("Count(EventDecision) = %d, want 3", got)
	}
	if got := c.Fallbacks(); got != 1 {
		t.Errorf("Fallbacks() = %d, want 1 (the local store's decision)", got)
	}
	if got := c.Count(core.EventBreakerOpen); got != 0 {
		t.Errorf("Count(EventBreakerOpen) = %d, want 0", got)
	}
	errs := c.Errs()
	if len(errs) != 1 || !errors.Is(errs[0], down) {
		t.Fatalf("Errs() = %v, want [%v]", errs, down)
	}
	errs[0] = nil
	if got := c.Errs(); got[0] == nil {
		t.Error("after changing Errs's result, Errs()[0] = nil: Errs returns a copy")
	}
}

func TestPlans(t *testing.T) {
	p := testkit.NewPlans(map[string]string{"k": "free"})
	ctx := context.Background()
	if tier, err := p.Resolve(ctx, "k"); tier != "free" || err != nil {
		t.Errorf("Resolve(k) = %q, %v; want free", tier, err)
	}
	p.Set("k", "pro")
	if tier, err := p.Resolve(ctx, "k"); tier != "pro" || err != nil {
		t.Errorf("Resolve(k) after Set(k, pro) = %q, %v; want pro", tier, err)
	}
	if _, err := p.Resolve(ctx, "other"); err == nil {
		t.Error("Resolve(other) = nil error, want one for a key without a plan")
	}
	if got := p.Calls(); got != 3 {
		t.Errorf("Calls() = %d, want 3", got)
	}
}

func TestPastClock(t *testing.T) {
	now, step := testkit.PastClock()
	start := now()
	if ago := time.Since(start); ago < time.Hour || ago > time.Hour+time.Minute || start.Truncate(time.Millisecond) != start {
		t.Errorf("PastClock starts %v ago at %v, want an hour ago on a whole millisecond", ago, start)
	}
	step(time.Microsecond)
	if got := now().Sub(start); got != time.Microsecond {
		t.Errorf("after step(1µs) the clock moved %v, want 1µs", got)
	}
}

func TestFailingStore(t *testing.T) {
	down := errors.New("down")
	s := testkit.FailingStore{Err: down}
	ctx := context.Background()
	q := driver.Query{Key: "k"}
	_, take := s.Take(ctx, q)
	_, peek := s.Peek(ctx, q)
	for name, err := range map[string]error{"Take": take, "Peek": peek, "Refund": s.Refund(ctx, q, 0), "Reset": s.Reset(ctx, q)} {
		if !errors.Is(err, down) {
			t.Errorf("%s = %v, want %v", name, err, down)
		}
	}
	l := testkit.Limiter(t, s, testkit.Policy("down", testkit.PerHour(1)), core.WithFailurePolicy(core.FailClosed))
	if d, err := l.Allow(ctx, "k"); err != nil || d.Allowed || d.Source != core.SourceClosed {
		t.Errorf("Allow on a FailingStore under FailClosed = %+v, %v; want denied by FailClosed", d, err)
	}
}

func TestUserKey(t *testing.T) {
	for _, tc := range []struct {
		user    string
		want    string
		wantErr error
	}{
		{"alice", "alice", nil},
		{"", "", keyfunc.ErrNoKey},
		{"!", "", testkit.ErrMalformedUser},
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		if tc.user != "" {
			r.Header.Set(testkit.UserHeader, tc.user)
		}
		if got, err := testkit.UserKey(keyfunc.FromHTTP(r, "/")); got != tc.want || !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
			t.Errorf("UserKey(%s: %q) = %q, %v; want %q, %v", testkit.UserHeader, tc.user, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestWaitUntil(t *testing.T) {
	n := 0
	testkit.WaitUntil(t, "n reaches 3", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Errorf("cond called %d times, want 3", n)
	}
}
