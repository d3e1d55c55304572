package testkit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
)

// Concurrency limits (Policy.InFlight), on every store.

// InFlight returns a limiter of an InFlight policy of k on store, with a
// timeout long enough that a loaded machine never makes it fall back.
func InFlight(t testing.TB, store core.Store, name string, k int64, opts ...core.Option) *core.Limiter {
	t.Helper()
	return Limiter(t, store, core.Policy{Name: name, InFlight: k}, append([]core.Option{core.WithTimeout(5 * time.Second)}, opts...)...)
}

// WantHeld fails t unless l's InFlight policy holds want units of key.
func WantHeld(t testing.TB, l *core.Limiter, key string, want int64) {
	t.Helper()
	d, err := l.Peek(context.Background(), key)
	if err != nil {
		t.Fatalf("Peek(%q): %v", key, err)
	}
	if rs := d.Rules(); len(rs) != 1 || rs[0].Used != want || d.Remaining != d.Limit-want {
		t.Errorf("Peek(%q) = %+v %+v, want %d units held", key, d, rs, want)
	}
}

// InFlightExact checks on b that instances × goroutines asking for one
// key never have more than K requests in flight, measured inside the
// "handler" (between the admission and its refund); that they do reach
// K; and that every lease is released at the end.
func InFlightExact(t *testing.T, b Backend) {
	const (
		k         = 4
		instances = 3
		workers   = 12 // per instance
		rounds    = 25 // per worker
	)
	ctx := context.Background()
	// A timeout long enough that a loaded machine never makes a decision
	// fall back.
	ls := Fleet(t, instances, b, core.Policy{Name: "exact-" + b.Name, InFlight: k}, core.WithTimeout(5*time.Second))
	var (
		cur, peak          atomic.Int64
		admitted, fallback atomic.Int64
		wg                 sync.WaitGroup
	)
	for i := range instances * workers {
		l := ls[i%instances]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				d, err := l.Allow(ctx, "tenant")
				if err != nil {
					t.Error(err)
					return
				}
				if d.Source != core.SourceStore {
					fallback.Add(1)
				}
				if !d.Allowed {
					if d.RetryAfter != time.Second {
						t.Errorf("denial RetryAfter = %v, want the 1s hint", d.RetryAfter)
					}
					continue
				}
				admitted.Add(1)
				n := cur.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				time.Sleep(time.Millisecond) // the handler
				cur.Add(-1)
				if err := d.Refund(ctx); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if n := fallback.Load(); n > 0 {
		t.Fatalf("%d decisions fell back: the store did not answer within the timeout", n)
	}
	if p := peak.Load(); p != k {
		t.Errorf("%d instances × %d goroutines: at most %d requests in flight at once, want exactly %d", instances, workers, p, k)
	}
	t.Logf("%s: %d of %d requests admitted, at most %d in flight", b.Name, admitted.Load(), instances*workers*rounds, peak.Load())
	for _, l := range ls {
		WantHeld(t, l, "tenant", 0)
	}
}

// InFlightRefundOnce checks on b that a lease is released once, however
// often its decision (or a copy of it) is refunded, and that releasing
// one lease never frees another.
func InFlightRefundOnce(t *testing.T, b Backend) {
	obs := &EventCounts{}
	l := Fleet(t, 1, b, core.Policy{Name: "once", InFlight: 3}, core.WithTimeout(5*time.Second), core.WithObserver(obs))[0]
	ctx := context.Background()
	var ds []core.Decision
	for i := range 3 {
		d, err := l.Allow(ctx, "k")
		if err != nil || !d.Allowed {
			t.Fatalf("Allow #%d = %+v, %v", i+1, d, err)
		}
		ds = append(ds, d)
	}
	cp := ds[0]
	for _, d := range []*core.Decision{&ds[0], &ds[0], &cp} {
		if err := d.Refund(ctx); err != nil {
			t.Fatal(err)
		}
	}
	WantHeld(t, l, "k", 2)
	if d, _ := l.Allow(ctx, "k"); !d.Allowed {
		t.Fatalf("after one release: Allow = %+v, want admitted", d)
	}
	if d, _ := l.Allow(ctx, "k"); d.Allowed {
		t.Fatalf("with 3 held again: Allow = %+v, want denied", d)
	}
	if got := obs.Count(core.EventDecision); got != 5 {
		t.Errorf("observer saw %d decisions for 5 Allow calls (and peeks, which are not decisions), want 5", got)
	}
}

// InFlightCost checks on b that a request of cost n holds n units, all
// released at once, and that a cost above the limit is invalid.
func InFlightCost(t *testing.T, b Backend) {
	l := Fleet(t, 1, b, core.Policy{Name: "cost", InFlight: 5}, core.WithTimeout(5*time.Second))[0]
	ctx := context.Background()
	big, err := l.AllowN(ctx, "k", 4)
	if err != nil || !big.Allowed || big.Remaining != 1 {
		t.Fatalf("AllowN(4) = %+v, %v; want admitted, 1 remaining", big, err)
	}
	if d, _ := l.AllowN(ctx, "k", 2); d.Allowed || d.Remaining != 1 {
		t.Fatalf("AllowN(2) with 4 of 5 held = %+v, want denied", d)
	}
	if err := big.Refund(ctx); err != nil {
		t.Fatal(err)
	}
	if d, _ := l.AllowN(ctx, "k", 5); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("AllowN(5) after the release = %+v, want admitted, none remaining", d)
	}
	if _, err := l.AllowN(ctx, "k", 6); !errors.Is(err, core.ErrInvalidCost) {
		t.Errorf("AllowN(6) over InFlight 5: err = %v, want ErrInvalidCost", err)
	}
}
