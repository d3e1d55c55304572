package guard_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/guard"
	"github.com/ratekit/ratekit/internal/test/testkit"
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
			l := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("out", testkit.PerHour(3)))
			if tc.full {
				for range 3 {
					_, _ = l.Allow(ctx, "alice")
				}
			}
			rec := &testkit.Events{}
			g := guard.New(l, append([]guard.Option{guard.WithKey(testkit.UserKey), guard.WithObserver(rec)}, tc.opts...)...)
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
			if tc.name == "dry run" && (!v.DryRun || rec.Count(guard.EventDryRun) != 1) {
				t.Errorf("dry run: DryRun %v, %d dry-run events; want true, 1", v.DryRun, rec.Count(guard.EventDryRun))
			}
		})
	}
}

// TestWaitAlso: limits added with WithAlso are waited for too; when one
// cannot be, the units of the others are given back.
func TestWaitAlso(t *testing.T) {
	ctx := context.Background()
	store := core.NewMemoryStore()
	own := testkit.Limiter(t, store, testkit.Policy("own", testkit.PerHour(5)))
	global := testkit.Limiter(t, store, testkit.Policy("global", core.Rule{Limit: 1, Window: 100 * time.Millisecond}))
	everyone := func(keyfunc.Request) (string, error) { return "all", nil }
	g := guard.New(own, guard.WithKey(testkit.UserKey), guard.WithAlso(global, everyone))

	for i := range 2 {
		// The second waits for the global limit's window, holding nothing.
		v := g.Wait(ctx, req().with("X-User", "alice"))
		if v.Outcome != guard.OutcomeAllow || v.Limiter() != own || v.Decision.Remaining != int64(4-i) {
			t.Fatalf("Wait #%d = %v by %s, remaining %d; want allowed by own with %d remaining", i+1, v.Outcome, v.Limiter().Policy().Name, v.Decision.Remaining, 4-i)
		}
	}
	if got := used(t, own, "alice"); got != 2 {
		t.Errorf("own holds %d units, want 2", got)
	}

	// The global limit cannot fit before the deadline: own's unit is refunded.
	gl := guard.New(own, guard.WithKey(testkit.UserKey), guard.WithAlso(testkit.Limiter(t, store, testkit.Policy("full", testkit.PerHour(1))), everyone))
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

// TestWaitBlock: the outgoing pipeline honours WithBlock as Admit does:
// a blocked request is refused before the skip predicate and any wait,
// takes no units, and its error says why.
func TestWaitBlock(t *testing.T) {
	ctx := context.Background()
	obs := &testkit.Events{}
	l := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("out-block", testkit.PerHour(1)))
	blocked := func(r keyfunc.Request) bool { return r.Header("X-User") == "mallory" }
	g := guard.New(l, guard.WithKey(testkit.UserKey), guard.WithBlock(blocked), guard.WithObserver(obs),
		guard.WithSkip(func(r keyfunc.Request) bool { return r.Header("X-Skip") != "" }))
	v := g.Wait(ctx, req().with("X-User", "mallory", "X-Skip", "1"))
	if v.Outcome != guard.OutcomeBlocked || v.Proceed() || !errors.Is(v.Err, guard.ErrBlocked) {
		t.Errorf("Wait(mallory) = %v (err %v), want blocked with ErrBlocked", v.Outcome, v.Err)
	}
	if got := used(t, l, "mallory"); got != 0 {
		t.Errorf("a blocked request took %d units", got)
	}
	if n := obs.Count(guard.EventBlock); n != 1 {
		t.Errorf("observer saw %d blocks, want 1", n)
	}
	if v := g.Wait(ctx, req().with("X-User", "alice")); v.Outcome != guard.OutcomeAllow {
		t.Errorf("Wait(alice) = %v, want allowed", v.Outcome)
	}
}

// TestCheckOutbound: what the outgoing pipeline cannot honour is named,
// so that adapters refuse it at construction.
func TestCheckOutbound(t *testing.T) {
	rate := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("out-check", testkit.PerHour(1)))
	conc := inFlight(t, core.NewMemoryStore(), "out-conc", 1)
	for _, tc := range []struct {
		name string
		g    *guard.Guard
		want string // "" means no error
	}{
		{"plain", guard.New(rate), ""},
		{"every option that applies", guard.New(rate, guard.WithKey(testkit.UserKey), guard.WithSkip(func(keyfunc.Request) bool { return false }),
			guard.WithBlock(func(keyfunc.Request) bool { return false }), guard.WithCost(cost), guard.WithNoKey(guard.NoKeyShared),
			guard.WithKeyError(guard.KeyErrorSkip), guard.WithDryRun(true), guard.WithObserver(&testkit.Events{}),
			guard.WithAlso(testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("out-also", testkit.PerHour(1))), testkit.UserKey)), ""},
		{"count-if", guard.New(rate, guard.WithCountIf(guard.StatusAuthFailure)), "WithCountIf"},
		{"reset-if", guard.New(rate, guard.WithResetIf(guard.StatusSuccess)), "WithResetIf"},
		{"in flight", guard.New(conc), `InFlight policy "out-conc"`},
		{"in flight added", guard.New(rate, guard.WithAlso(conc, testkit.UserKey)), `InFlight policy "out-conc"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.g.CheckOutbound()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("CheckOutbound() = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("CheckOutbound() = %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

// TestWaitAlsoHoldsWhenSent: with WithAlso, the units of every limit are
// taken together, when the request goes on: a unit of the first limit is
// never kept while the next one is waited for. The guard's own limit (5
// per 200 ms) admits at most 5 requests within any 200 ms of their
// return from Wait, although the added limit, full at first, frees 20
// at once.
func TestWaitAlsoHoldsWhenSent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := core.NewMemoryStore()
	own := testkit.Limiter(t, store, testkit.Policy("own-200ms", core.Rule{Limit: 5, Window: 200 * time.Millisecond}))
	global := testkit.Limiter(t, store, testkit.Policy("global-1s", core.Rule{Limit: 20, Window: time.Second}))
	if _, err := global.AllowN(ctx, "all", 20); err != nil {
		t.Fatal(err)
	}
	everyone := func(keyfunc.Request) (string, error) { return "all", nil }
	g := guard.New(own, guard.WithKey(testkit.UserKey), guard.WithAlso(global, everyone))
	var (
		mu    sync.Mutex
		times []time.Time
		wg    sync.WaitGroup
	)
	for range 30 {
		wg.Go(func() {
			v := g.Wait(ctx, req().with("X-User", "alice"))
			now := time.Now()
			if v.Outcome != guard.OutcomeAllow {
				t.Errorf("Wait = %v (%v), want allowed", v.Outcome, v.Err)
				return
			}
			mu.Lock()
			times = append(times, now)
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	for i := range times {
		n := 0
		for j := i; j < len(times) && times[j].Sub(times[i]) < 180*time.Millisecond; j++ {
			n++
		}
		if n > 5 {
			t.Fatalf("%d admissions within 180 ms from the %dth; the own limit allows 5 per 200 ms", n, i+1)
		}
	}
	if got := used(t, own, "alice"); got > 5 {
		t.Errorf("own holds %d units of alice, want at most 5", got)
	}
}
