package core_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/driver"
)

// recorderStore is a faultyStore that records a limiter's fallback
// admissions (a driver.Recorder): recordFails of its Record calls fail,
// and each waits for gate when one is set. It counts the takes of a key
// that ran while a Record of the key was under way.
type recorderStore struct {
	*faultyStore
	recordFails atomic.Int32
	gate        chan struct{} // nil: Record does not wait
	started     chan struct{} // told when a Record begins, if set
	recording   atomic.Int32
	early       atomic.Int32 // takes while a Record was under way
}

func (s *recorderStore) Record(ctx context.Context, q driver.Query, _ time.Duration) (int64, error) {
	s.recording.Add(1)
	defer s.recording.Add(-1)
	if s.started != nil {
		s.started <- struct{}{}
	}
	if s.gate != nil {
		<-s.gate
	}
	if s.recordFails.Add(-1) >= 0 {
		return 0, errStoreDown
	}
	res, err := s.faultyStore.Take(ctx, q)
	return res.At, err
}

func (s *recorderStore) Take(ctx context.Context, q driver.Query) (driver.Result, error) {
	if s.recording.Load() > 0 {
		s.early.Add(1)
	}
	return s.faultyStore.Take(ctx, q)
}

// outage admits 3 of k's limit of 5 by the store, then 2 by the local
// fallback while the store fails (its circuit breaker opening), and
// lets the store answer again.
func outage(t *testing.T, s *recorderStore, l *core.Limiter) {
	t.Helper()
	ctx := context.Background()
	for range 3 {
		if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed || d.Source != core.SourceStore {
			t.Fatalf("Allow(k) before the outage = %+v, %v; want admitted by the store", d, err)
		}
	}
	s.mode.Store(modeFail)
	admitted := 0
	for range 4 {
		if d, _ := l.Allow(ctx, "k"); d.Allowed && d.Source == core.SourceLocal {
			admitted++
		}
	}
	if admitted != 2 {
		t.Fatalf("%d admitted by the local fallback during the outage, want 2", admitted)
	}
	s.mode.Store(modePass)
	time.Sleep(60 * time.Millisecond) // the breaker's cool-down
}

func replayLimiter(t *testing.T, s *recorderStore) *core.Limiter {
	t.Helper()
	l, err := core.NewLimiter(s, core.Policy{Name: "replay", Rules: []core.Rule{{Limit: 5, Window: time.Minute}}},
		core.WithTimeout(5*time.Second), core.WithBreaker(2, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestReplayFailedFallsBack: when telling the store what the fallback
// admitted of a key fails, the store does not decide the key (it would
// admit from a window that lacks them): the fallback does, and the
// minute admits 5 of 5 (6 before, the store taking the decision anyway).
func TestReplayFailedFallsBack(t *testing.T) {
	s := &recorderStore{faultyStore: newFaultyStore()}
	l := replayLimiter(t, s)
	outage(t, s, l)
	s.recordFails.Store(1)
	ctx := context.Background()
	d, err := l.Allow(ctx, "k")
	if err != nil || d.Allowed || d.Source != core.SourceLocal {
		t.Errorf("Allow(k) with the recording failing = %+v, %v; want denied by the local fallback (its window is full)", d, err)
	}
	time.Sleep(60 * time.Millisecond) // the breaker's cool-down, its probe having failed
	for i := range 3 {
		if d, err := l.Allow(ctx, "k"); err != nil || d.Allowed || d.Source == core.SourceLocal {
			t.Errorf("Allow(k) #%d once the store is told = %+v, %v; want denied by the store or its cache", i+1, d, err)
		}
	}
}

// TestReplayUnderWayWaits: a decision of a key whose fallback admissions
// are being told in the background waits for them before the store
// decides it.
func TestReplayUnderWayWaits(t *testing.T) {
	s := &recorderStore{faultyStore: newFaultyStore()}
	l := replayLimiter(t, s)
	outage(t, s, l)
	s.gate, s.started = make(chan struct{}), make(chan struct{}, 2) // one per unit told
	ctx := context.Background()
	// Another key's decision ends the outage and starts telling k's in
	// the background, which waits at the gate.
	if d, err := l.Allow(ctx, "other"); err != nil || d.Source != core.SourceStore {
		t.Fatalf("Allow(other) after the outage = %+v, %v; want a decision of the store", d, err)
	}
	<-s.started
	done := make(chan core.Decision)
	go func() {
		d, _ := l.Allow(ctx, "k")
		done <- d
	}()
	time.Sleep(50 * time.Millisecond) // Allow(k) is waiting (or, before, had taken)
	close(s.gate)
	if d := <-done; d.Allowed {
		t.Errorf("Allow(k) after the outage = %+v; want denied (5 of 5 admitted)", d)
	}
	if n := s.early.Load(); n != 0 {
		t.Errorf("%d takes of the store while the fallback's admissions were being told, want 0", n)
	}
}
