package guard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/keyfunc"
)

// used returns the units key holds in l's first rule.
func used(t *testing.T, l *core.Limiter, key string) int64 {
	t.Helper()
	d, err := l.Peek(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return d.Rules()[0].Used
}

// TestWait: the outgoing pipeline skips, keys and costs as Admit does,
// but waits instead of refusing; what cannot be waited for is refused
// with its reason, holding no units.
func TestWait(t *testing.T) {
	ctx := context.Background()
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	tests := []struct {
		name    string
		opts    []guard.Option
		r       *request
		ctx     context.Context
		full    bool // the key "alice" is full for an hour first
		want    guard.Outcome
		wantErr error
		used    int64 // units alice holds afterwards
	}{
		{name: "admitted", r: req().with("X-User", "alice"), want: guard.OutcomeAllow, used: 1},
		{name: "cost", opts: []guard.Option{guard.WithCost(cost)}, r: req().with("X-User", "alice").withQuery("cost", "2"), want: guard.OutcomeAllow, used: 2},
		{name: "skip", opts: []guard.Option{guard.WithSkip(func(keyfunc.Request) bool { return true })}, r: req().with("X-User", "alice"), want: guard.OutcomeSkip},
		{name: "no key", r: req(), want: guard.OutcomeSkip},
		{name: "no key rejected", opts: []guard.Option{guard.WithNoKey(guard.NoKeyReject)}, r: req(), want: guard.OutcomeInvalid, wantErr: keyfunc.ErrNoKey},
		{name: "malformed key", r: req().with("X-User", "!"), want: guard.OutcomeInvalid},
		{name: "malformed key skipped", opts: []guard.Option{guard.WithKeyError(guard.KeyErrorSkip)}, r: req().with("X-User", "!"), want: guard.OutcomeSkip},
		{name: "cost below 1", opts: []guard.Option{guard.WithCost(cost)}, r: req().with("X-User", "alice").withQuery("cost", "0"), want: guard.OutcomeInvalid},
		{name: "cost never fits", opts: []guard.Option{guard.WithCost(cost)}, r: req().with("X-User", "alice").withQuery("cost", "4"), want: guard.OutcomeDeny, wantErr: core.ErrInvalidCost},
		{name: "past the deadline", r: req().with("X-User", "alice"), ctx: short, full: true, want: guard.OutcomeUnavailable, wantErr: context.DeadlineExceeded, used: 3},
		{name: "dry run", opts: []guard.Option{guard.WithDryRun(true)}, r: req().with("X-User", "alice"), full: true, want: guard.OutcomeAllow, used: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := limiter(t, core.NewMemoryStore(), "out", perHour(3))
			if tc.full {
				for range 3 {
					_, _ = l.Allow(ctx, "alice")
				}
			}
			rec := &recorder{}
			g := guard.New(l, append([]guard.Option{guard.WithKey(user), guard.WithObserver(rec)}, tc.opts...)...)
			c := tc.ctx
			if c == nil {
				c = ctx
			}
			v := g.Wait(c, tc.r)
			if v.Outcome != tc.want || tc.wantErr != nil && !errors.Is(v.Err, tc.wantErr) || v.Proceed() != (v.Err == nil) {
				t.Errorf("Wait = %v (err %v), want %v (err %v)", v.Outcome, v.Err, tc.want, tc.wantErr)
			}
			if got := used(t, l, "alice"); got != tc.used {
				t.Errorf("alice holds %d units, want %d", got, tc.used)
			}
			if tc.name == "past the deadline" && c.Err() != nil {
				t.Errorf("Wait returned after the deadline, want at once")
			}
			if tc.name == "dry run" && (!v.DryRun || rec.count(core.EventDryRun) != 1) {
				t.Errorf("dry run: DryRun %v, %d dry-run events; want true, 1", v.DryRun, rec.count(core.EventDryRun))
			}
		})
	}
}

// TestWaitAlso: limits added with WithAlso are waited for in order; when
// one cannot be, the units of the others are given back.
func TestWaitAlso(t *testing.T) {
	ctx := context.Background()
	store := core.NewMemoryStore()
	own := limiter(t, store, "own", perHour(5))
	global := limiter(t, store, "global", core.Rule{Limit: 1, Window: 100 * time.Millisecond})
	everyone := func(keyfunc.Request) (string, error) { return "all", nil }
	g := guard.New(own, guard.WithKey(user), guard.WithAlso(global, everyone))

	for i := range 2 {
		// The second waits for the global limit's window, holding its own unit.
		v := g.Wait(ctx, req().with("X-User", "alice"))
		if v.Outcome != guard.OutcomeAllow || v.Limiter() != own || v.Decision.Remaining != int64(4-i) {
			t.Fatalf("Wait #%d = %v by %s, remaining %d; want allowed by own with %d remaining", i+1, v.Outcome, v.Limiter().Policy().Name, v.Decision.Remaining, 4-i)
		}
	}
	if got := used(t, own, "alice"); got != 2 {
		t.Errorf("own holds %d units, want 2", got)
	}

	// The global limit cannot fit before the deadline: own's unit is refunded.
	gl := guard.New(own, guard.WithKey(user), guard.WithAlso(limiter(t, store, "full", perHour(1)), everyone))
	if v := gl.Wait(ctx, req().with("X-User", "bob")); v.Outcome != guard.OutcomeAllow {
		t.Fatalf("Wait(bob) = %v, want allowed", v.Outcome)
	}
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	v := gl.Wait(short, req().with("X-User", "bob"))
	if v.Outcome != guard.OutcomeUnavailable || !errors.Is(v.Err, context.DeadlineExceeded) || v.Limiter().Policy().Name != "full" {
		t.Errorf("Wait(bob) with the added limit full for an hour = %v (%v), want unavailable by \"full\"", v.Outcome, v.Err)
	}
	if got := used(t, own, "bob"); got != 1 {
		t.Errorf("own holds %d units of bob, want 1: the refused request's unit is refunded", got)
	}
}
