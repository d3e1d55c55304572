package ratekitslog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// capture is a slog.Handler that keeps every record as one line:
// "LEVEL msg k=v k=v".
type capture struct {
	mu    sync.Mutex
	level slog.Level
	lines []string
}

func (c *capture) Enabled(_ context.Context, l slog.Level) bool { return l >= c.level }

func (c *capture) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.Level, r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	c.mu.Lock()
	c.lines = append(c.lines, b.String())
	c.mu.Unlock()
	return nil
}

func (c *capture) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *capture) WithGroup(string) slog.Handler      { return c }

func TestRateLimitedLog(t *testing.T) {
	down := errors.New("dial tcp 127.0.0.1:6379: connection refused")
	storeErr := func(policy string) core.Event {
		return core.Event{Kind: core.EventStoreError, Policy: policy, Key: "secret-key", Err: down, Latency: 20 * time.Millisecond}
	}
	type step struct {
		at time.Duration // since the start
		ev core.Event
	}
	tests := []struct {
		name  string
		level slog.Level
		steps []step
		want  []string
	}{
		{
			name: "one line per interval with the count left out",
			steps: []step{
				{0, storeErr("login")},
				{time.Second, storeErr("login")},
				{2 * time.Second, storeErr("login")},
				{10 * time.Second, storeErr("login")},
				{11 * time.Second, storeErr("login")},
			},
			want: []string{
				"WARN " + MsgStoreError + " policy=login error=" + down.Error() + " latency=20ms suppressed=0",
				"WARN " + MsgStoreError + " policy=login error=" + down.Error() + " latency=20ms suppressed=2",
			},
		},
		{
			name: "policies are limited apart",
			steps: []step{
				{0, storeErr("login")},
				{0, storeErr("sms")},
				{time.Second, storeErr("sms")},
			},
			want: []string{
				"WARN " + MsgStoreError + " policy=login error=" + down.Error() + " latency=20ms suppressed=0",
				"WARN " + MsgStoreError + " policy=sms error=" + down.Error() + " latency=20ms suppressed=0",
			},
		},
		{
			name: "breaker lines are limited apart from store errors; close reports what was left out",
			steps: []step{
				{0, storeErr("login")},
				{time.Second, storeErr("login")},
				{time.Second, core.Event{Kind: core.EventBreakerOpen, Policy: "login", Err: down}},
				{2 * time.Second, storeErr("login")},
				{3 * time.Second, core.Event{Kind: core.EventBreakerClose, Policy: "login"}},
				{4 * time.Second, core.Event{Kind: core.EventBreakerOpen, Policy: "login", Err: down}},
				{5 * time.Second, core.Event{Kind: core.EventBreakerClose, Policy: "login"}},
				{14 * time.Second, core.Event{Kind: core.EventBreakerClose, Policy: "login"}},
			},
			want: []string{
				"WARN " + MsgStoreError + " policy=login error=" + down.Error() + " latency=20ms suppressed=0",
				"ERROR " + MsgBreakerOpen + " policy=login error=" + down.Error() + " suppressed=0",
				"INFO " + MsgBreakerClose + " policy=login suppressed=0 store_errors_suppressed=2",
				"INFO " + MsgBreakerClose + " policy=login suppressed=1 store_errors_suppressed=0",
			},
		},
		{
			name: "decisions, skips and key errors are not logged",
			steps: []step{
				{0, core.Event{Kind: core.EventDecision, Policy: "login", Key: "k"}},
				{0, core.Event{Kind: guard.EventSkip, Policy: "login"}},
				{0, core.Event{Kind: guard.EventKeyError, Policy: "login", Err: errors.New("bad phone")}},
			},
		},
		{
			name:  "a disabled level costs no line and no count",
			level: slog.LevelError,
			steps: []step{
				{0, storeErr("login")},
				{time.Second, core.Event{Kind: core.EventBreakerOpen, Policy: "login", Err: down}},
			},
			want: []string{
				"ERROR " + MsgBreakerOpen + " policy=login error=" + down.Error() + " suppressed=0",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := &capture{level: tc.level}
			o := New(slog.New(h), 10*time.Second)
			start := time.Unix(1700000000, 0)
			var now time.Time
			o.now = func() time.Time { return now }
			for _, s := range tc.steps {
				now = start.Add(s.at)
				o.Observe(context.Background(), s.ev)
			}
			if strings.Join(h.lines, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("logged:\n%s\nwant:\n%s", strings.Join(h.lines, "\n"), strings.Join(tc.want, "\n"))
			}
			for _, l := range h.lines {
				if strings.Contains(l, "secret-key") {
					t.Errorf("line %q logs the key", l)
				}
			}
		})
	}
}

func TestNewDefaults(t *testing.T) {
	if o := New(slog.Default(), 0); o.every != DefaultInterval {
		t.Errorf("New(logger, 0).every = %v, want %v", o.every, DefaultInterval)
	}
	defer func() {
		if recover() == nil {
			t.Error("New(nil, …) did not panic")
		}
	}()
	New(nil, time.Second)
}

// TestWithLimiter attaches the observer to a limiter whose store fails:
// a burst of failures logs one store-error line, one line for the start
// of the fallback episode and one breaker line.
func TestWithLimiter(t *testing.T) {
	h := &capture{}
	obs := New(slog.New(h), time.Minute)
	l := testkit.Limiter(t, testkit.FailingStore{Err: errors.New("store down")}, core.Policy{Name: "login", Rules: []core.Rule{{Limit: 5, Window: time.Minute}}},
		core.WithObserver(obs), core.WithBreaker(3, time.Minute))
	for range 100 {
		if _, err := l.Allow(context.Background(), "user"); err != nil {
			t.Fatal(err)
		}
	}
	if len(h.lines) != 3 || !strings.Contains(h.lines[0], MsgStoreError) || !strings.Contains(h.lines[1], MsgFallback) ||
		!strings.Contains(h.lines[2], MsgBreakerOpen) {
		t.Errorf("logged %d lines, want a store error, a fallback start and a breaker opening:\n%s", len(h.lines), strings.Join(h.lines, "\n"))
	}
}
