package core_test

// The Redis-backed tests that stay in core: each needs a hook of the
// engine's that only core's own tests have (export_test.go: a lease
// renewal round now, the refusals flushed every 20 ms, a limiter that
// counts no refusals), so it cannot run from a driver's package. Every
// other Redis-backed test of the engine runs in internal/test/redissuite, on
// each driver; the wait tests on Redis, which need Limiter.Waiting and
// AdmittedAt, run through testkit.Backends (wait_test.go).

import (
	"context"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/redisstore"
)

// TestInFlightRenewal: a lease outlives its TTL while its limiter renews
// it, and lapses LeaseTTL after the last renewal when it stops.
func TestInFlightRenewal(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const ttl = 10 * time.Second
	now, step := testkit.PastClock()
	p := core.Policy{Name: "renew", InFlight: 1, LeaseTTL: ttl}
	a := testkit.Limiter(t, redisstore.New(srv.Client(t)), p, core.WithClock(now), core.WithTimeout(5*time.Second))
	b := testkit.Limiter(t, redisstore.New(srv.Client(t)), p, core.WithClock(now), core.WithTimeout(5*time.Second))
	ctx := context.Background()
	d, err := a.Allow(ctx, "long")
	if err != nil || !d.Allowed {
		t.Fatalf("Allow = %+v, %v", d, err)
	}
	t.Cleanup(func() { _ = d.Refund(ctx) })
	for i := range 3 {
		step(ttl * 9 / 10)
		core.RenewLeases(a, ctx)
		if got, _ := b.Allow(ctx, "long"); got.Allowed {
			t.Fatalf("%v after the admission, renewed %d times: Allow = %+v, want denied", time.Duration(i+1)*ttl*9/10, i+1, got)
		}
	}
	// No renewal from here: the lease lapses ttl after the last one.
	step(ttl - time.Microsecond)
	if got, _ := b.Allow(ctx, "long"); got.Allowed {
		t.Fatalf("1µs before the lease lapses: Allow = %+v, want denied", got)
	}
	step(time.Microsecond)
	if got, _ := b.Allow(ctx, "long"); !got.Allowed {
		t.Fatalf("when the lease lapses: Allow = %+v, want admitted", got)
	}
}

// TestInFlightLostLease: a renewal that finds its lease gone (the key was
// reset by an operator) reports it to the observers instead of losing it
// silently.
func TestInFlightLostLease(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	obs := &testkit.EventCounts{}
	l := testkit.Limiter(t, redisstore.New(srv.Client(t)), core.Policy{Name: "lost", InFlight: 1},
		core.WithTimeout(5*time.Second), core.WithObserver(obs))
	ctx := context.Background()
	d, _ := l.Allow(ctx, "k")
	if !d.Allowed {
		t.Fatalf("Allow = %+v", d)
	}
	if err := l.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	core.RenewLeases(l, ctx)
	errs := obs.Errs()
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "lease lost") {
		t.Fatalf("observer errors after the renewal of a reset lease: %v, want one lost lease", errs)
	}
	core.RenewLeases(l, ctx)
	if got := obs.Count(core.EventStoreError); got != 1 {
		t.Errorf("store errors after a second renewal: %d, want still 1 (a lost lease is reported once)", got)
	}
	if err := d.Refund(ctx); err != nil {
		t.Errorf("Refund of the lost lease: %v, want nil", err)
	}
}

// TestTopRefusedBackground: an instance adds its refusals to the store by
// itself, within its flush interval, and leaves no goroutine behind once
// it has.
func TestTopRefusedBackground(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { testkit.VerifyNoLeaks(t, ignore) })
	srv := redistest.Start(t)
	p := testkit.Policy("top-background", testkit.PerHour(1))
	opts := []core.Option{core.WithTimeout(testkit.StoreTimeout), core.WithRefusedEvery(20 * time.Millisecond)}
	a := testkit.Limiter(t, redisstore.New(srv.Client(t)), p, opts...)
	b := testkit.Limiter(t, redisstore.New(srv.Client(t)), p, opts...)
	testkit.Admit(t, b, "mallory")
	testkit.Refuse(t, b, "mallory", 25)
	want := []core.RefusedKey{{Key: "mallory", Refusals: 25}}
	testkit.WaitUntil(t, "instance a sees instance b's refusals", func() bool {
		return reflect.DeepEqual(testkit.TopRefused(t, a, 5), want)
	})
	// And again, after a pause: the next refusal arms the next flush.
	time.Sleep(50 * time.Millisecond)
	testkit.Refuse(t, b, "mallory", 5)
	want[0].Refusals = 30
	testkit.WaitUntil(t, "instance a sees the later refusals", func() bool {
		return reflect.DeepEqual(testkit.TopRefused(t, a, 5), want)
	})
}

// BenchmarkLimiterDenied measures a denied flood: one hot key over its
// limit, from one goroutine and from GOMAXPROCS goroutines, with the
// limiter counting its refusals (TopRefused, as in production) and
// without. On Redis the denials come from the deny cache, as they do in
// `make bench`'s denied flood, whose figure must stay at least 80 times
// the Redis ceiling; on the memory store, from the store.
func BenchmarkLimiterDenied(b *testing.B) {
	b.Run("memory", func(b *testing.B) {
		benchDenied(b, func(testing.TB) core.Store { return core.NewMemoryStore() }, core.SourceStore)
	})
	b.Run("redis", func(b *testing.B) {
		srv := redistest.Start(b) // skipped with -short
		benchDenied(b, func(tb testing.TB) core.Store { return redisstore.New(srv.Client(tb)) }, core.SourceCache)
	})
}

func benchDenied(b *testing.B, newStore func(testing.TB) core.Store, src core.Source) {
	for _, counting := range []struct {
		name string
		opts []core.Option
	}{{"counted", nil}, {"uncounted", []core.Option{core.WithoutRefusals()}}} {
		b.Run(counting.name, func(b *testing.B) {
			opts := append([]core.Option{core.WithTimeout(time.Second)}, counting.opts...)
			l, err := core.NewLimiter(newStore(b), core.Policy{Name: "bench-denied-" + counting.name,
				Rules: []core.Rule{{Limit: 10, Window: time.Minute}}}, opts...)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			deadline := time.Now().Add(10 * time.Second)
			for {
				d, err := l.Allow(ctx, "flood")
				if err != nil {
					b.Fatal(err)
				}
				if !d.Allowed && d.Source == src {
					break
				}
				if time.Now().After(deadline) {
					b.Fatalf("no denial from %v after 10 s: %+v", src, d)
				}
			}
			var wrong atomic.Int64
			deny := func() {
				if d, err := l.Allow(ctx, "flood"); err != nil || d.Allowed || d.Source != src {
					wrong.Add(1)
				}
			}
			b.Run("serial", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					deny()
				}
			})
			b.Run("parallel", func(b *testing.B) {
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						deny()
					}
				})
			})
			if n := wrong.Load(); n > 0 {
				b.Errorf("%d decisions were not denials from %v", n, src)
			}
		})
	}
}
