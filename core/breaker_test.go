package core_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// Modes of a faultyStore.
const (
	modePass int32 = iota // calls reach the MemoryStore underneath
	modeFail              // calls fail at once
	modeHang              // calls block until their context ends
)

var errStoreDown = errors.New("store down")

// faultyStore is a Store whose calls pass through to a MemoryStore, fail
// or hang, as its mode says; it counts the calls that reach it.
type faultyStore struct {
	core.Store
	mode  atomic.Int32
	calls atomic.Int64
}

func newFaultyStore() *faultyStore { return &faultyStore{Store: core.NewMemoryStore()} }

func (s *faultyStore) fault(ctx context.Context) error {
	s.calls.Add(1)
	switch s.mode.Load() {
	case modeFail:
		return errStoreDown
	case modeHang:
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (s *faultyStore) Take(ctx context.Context, q driver.Query) (driver.Result, error) {
	if err := s.fault(ctx); err != nil {
		return driver.Result{}, err
	}
	return s.Store.Take(ctx, q)
}

func (s *faultyStore) Peek(ctx context.Context, q driver.Query) (driver.Result, error) {
	if err := s.fault(ctx); err != nil {
		return driver.Result{}, err
	}
	return s.Store.Peek(ctx, q)
}

func TestBreakerOpensSkipsStoreAndCloses(t *testing.T) {
	const (
		threshold = 3
		cooldown  = 50 * time.Millisecond
	)
	store := newFaultyStore()
	obs := &testkit.EventCounts{}
	l, err := core.NewLimiter(store, core.Policy{Name: "p", Rules: []core.Rule{{Limit: 100, Window: time.Minute}}},
		core.WithBreaker(threshold, cooldown), core.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	store.mode.Store(modeFail)
	for i := range threshold + 5 {
		d, err := l.Allow(ctx, "k")
		if err != nil || d.Source != core.SourceLocal || !d.Allowed {
			t.Fatalf("Allow #%d with the store failing = %+v, %v; want allowed locally", i+1, d, err)
		}
	}
	if got := store.calls.Load(); got != threshold {
		t.Errorf("store calls with the store failing = %d, want %d (none once the breaker opened)", got, threshold)
	}
	if got := obs.Count(core.EventStoreError); got != threshold {
		t.Errorf("EventStoreError count = %d, want %d", got, threshold)
	}
	if got := obs.Count(core.EventBreakerOpen); got != 1 {
		t.Errorf("EventBreakerOpen count = %d, want 1", got)
	}

	// Cool-down passed, store still failing: one probe, which reopens.
	time.Sleep(cooldown + 10*time.Millisecond)
	for range 5 {
		if d, _ := l.Allow(ctx, "k"); d.Source != core.SourceLocal {
			t.Fatalf("Allow after a failed probe = %+v, want Source local", d)
		}
	}
	if got := store.calls.Load(); got != threshold+1 {
		t.Errorf("store calls after the cool-down = %d, want %d (one probe)", got, threshold+1)
	}

	// Cool-down passed, store healthy: the probe closes the breaker.
	store.mode.Store(modePass)
	time.Sleep(cooldown + 10*time.Millisecond)
	for i := range 3 {
		if d, _ := l.Allow(ctx, "k"); d.Source != core.SourceStore {
			t.Fatalf("Allow #%d after the store recovered = %+v, want Source store", i+1, d)
		}
	}
	if got := obs.Count(core.EventBreakerClose); got != 1 {
		t.Errorf("EventBreakerClose count = %d, want 1", got)
	}
	for _, err := range obs.Errs() {
		if !errors.Is(err, errStoreDown) {
			t.Errorf("observed error %v, want it to wrap the store's error", err)
		}
	}
}

// openBreaker returns a limiter on a failing store whose breaker (one
// failure, cooldown) one decision has just opened.
func openBreaker(t *testing.T, cooldown, timeout time.Duration) (*faultyStore, *core.Limiter) {
	t.Helper()
	store := newFaultyStore()
	l, err := core.NewLimiter(store, core.Policy{Name: "p", Rules: []core.Rule{{Limit: 1000, Window: time.Minute}}},
		core.WithBreaker(1, cooldown), core.WithTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	store.mode.Store(modeFail)
	if d, err := l.Allow(context.Background(), "k"); err != nil || d.Source != core.SourceLocal {
		t.Fatalf("Allow with the store failing = %+v, %v; want Source local", d, err)
	}
	return store, l
}

// TestBreakerOneProbeAtATime: when the cool-down ends, concurrent requests
// do not all hit a store that may still be down.
func TestBreakerOneProbeAtATime(t *testing.T) {
	const cooldown = 20 * time.Millisecond
	store, l := openBreaker(t, cooldown, 200*time.Millisecond)
	ctx := context.Background()
	store.mode.Store(modeHang)
	time.Sleep(cooldown + 10*time.Millisecond)
	before := store.calls.Load()
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			if d, err := l.Allow(ctx, "k"); err != nil || d.Source != core.SourceLocal {
				t.Errorf("Allow during the probe = %+v, %v; want Source local", d, err)
			}
		})
	}
	wg.Wait()
	if got := store.calls.Load() - before; got != 1 {
		t.Errorf("32 concurrent requests after the cool-down made %d store calls, want 1 probe", got)
	}
}

// TestBreakerProbeAbandonedByCaller: a probe whose caller gives up (its
// context ends) says nothing about the store; the breaker must still probe
// again and close once the store is back.
func TestBreakerProbeAbandonedByCaller(t *testing.T) {
	const cooldown = 20 * time.Millisecond
	store, l := openBreaker(t, cooldown, time.Second)
	time.Sleep(cooldown + 10*time.Millisecond)

	// The probe hangs and its caller gives up first.
	store.mode.Store(modeHang)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	_, err := l.Allow(ctx, "k")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Allow whose context ended during the store call: error %v, want context.DeadlineExceeded", err)
	}

	store.mode.Store(modePass)
	deadline := time.Now().Add(time.Second)
	for {
		d, err := l.Allow(context.Background(), "k")
		if err != nil {
			t.Fatal(err)
		}
		if d.Source == core.SourceStore {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Allow 1 s after the store recovered = %+v, want Source store (breaker stuck half-open)", d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestBreakerPeekIsNoProbe: a peek after the cool-down (an operator's
// look at a key) reads the store without taking the probe's place, and
// says nothing of its health: the next decision still probes, and closes
// the breaker once the store is back.
func TestBreakerPeekIsNoProbe(t *testing.T) {
	const cooldown = 20 * time.Millisecond
	store, l := openBreaker(t, cooldown, time.Second)
	ctx := context.Background()
	if d, err := l.Peek(ctx, "k"); err != nil || d.Source != core.SourceLocal {
		t.Fatalf("Peek while the breaker is open = %+v, %v; want Source local (no store call)", d, err)
	}
	store.mode.Store(modePass)
	time.Sleep(cooldown + 10*time.Millisecond)

	before := store.calls.Load()
	for i := range 3 {
		if d, err := l.Peek(ctx, "k"); err != nil || d.Source != core.SourceStore {
			t.Fatalf("Peek #%d after the cool-down = %+v, %v; want Source store", i+1, d, err)
		}
	}
	if got := store.calls.Load() - before; got != 3 {
		t.Errorf("3 peeks after the cool-down made %d store calls, want 3", got)
	}
	for i := range 3 {
		if d, err := l.Allow(ctx, "k"); err != nil || d.Source != core.SourceStore {
			t.Fatalf("Allow #%d after the peeks = %+v, %v; want Source store (the probe closes the breaker)", i+1, d, err)
		}
	}
}
