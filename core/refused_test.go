package core_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// TestTopRefusedFleet: two instances on one store refuse different counts
// of several keys, most of them answered by their deny caches on Redis;
// once the second has added its counts, TopRefused on either returns the
// exact sums, most refused first and ties in key order.
func TestTopRefusedFleet(t *testing.T) {
	// On Redis: internal/test/redissuite's TopRefusedFleet.
	testkit.TopRefusedFleet(t, testkit.Memory)
}

// TestTopRefusedCounts: what counts as a refusal. Every denial counts,
// under the key as the app gave it (bounded, without a shard's suffix),
// whichever tier decided it, and the local fallback's denials too; an
// admission does not, nor a FailClosed refusal of every key while the
// store is down.
func TestTopRefusedCounts(t *testing.T) {
	ctx := context.Background()
	// The shards and tiers on Redis: internal/test/redissuite's TopRefusedCounts.
	t.Run("shards", func(t *testing.T) { testkit.TopRefusedShards(t, testkit.Memory) })
	t.Run("tiers", func(t *testing.T) { testkit.TopRefusedTiers(t, testkit.Memory) })
	t.Run("long key", func(t *testing.T) {
		long := strings.Repeat("k", 500)
		l := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("top-long", testkit.PerHour(1)))
		testkit.Admit(t, l, long)
		testkit.Refuse(t, l, long, 2)
		want := []core.RefusedKey{{Key: driver.BoundKey(long), Refusals: 2}}
		if got := testkit.TopRefused(t, l, 5); !reflect.DeepEqual(got, want) {
			t.Errorf("TopRefused = %v, want %v", got, want)
		}
	})
	t.Run("store down", func(t *testing.T) {
		down := testkit.FailingStore{Err: fmt.Errorf("down")}
		local := testkit.Limiter(t, down, testkit.Policy("top-down-local", testkit.PerHour(1)), core.WithBreaker(0, 0))
		closed := testkit.Limiter(t, down, testkit.Policy("top-down-closed", testkit.PerHour(1)),
			core.WithFailurePolicy(core.FailClosed), core.WithBreaker(0, 0))
		for range 3 {
			_, _ = local.Allow(ctx, "k")
			if d, _ := closed.Allow(ctx, "k"); d.Allowed || d.Source != core.SourceClosed {
				t.Fatalf("FailClosed with the store down: %+v", d)
			}
		}
		// The store keeps no refusals: each limiter reports its own.
		if got, want := testkit.TopRefused(t, local, 5), []core.RefusedKey{{Key: "k", Refusals: 2}}; !reflect.DeepEqual(got, want) {
			t.Errorf("FailLocal: TopRefused = %v, want %v", got, want)
		}
		if got := testkit.TopRefused(t, closed, 5); len(got) != 0 {
			t.Errorf("FailClosed: TopRefused = %v, want nothing", got)
		}
	})
	t.Run("in flight", func(t *testing.T) {
		l := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "top-inflight", InFlight: 1})
		d, err := l.Allow(ctx, "download")
		if err != nil || !d.Allowed {
			t.Fatalf("Allow = %+v, %v", d, err)
		}
		testkit.Refuse(t, l, "download", 2)
		if got, want := testkit.TopRefused(t, l, 5), []core.RefusedKey{{Key: "download", Refusals: 2}}; !reflect.DeepEqual(got, want) {
			t.Errorf("TopRefused = %v, want %v", got, want)
		}
		_ = d.Refund(ctx)
	})
}

// TestDeniedPathAllocs: counting refusals costs the denied path no
// allocation: denials of the memory store, hot or spread over many keys
// (a flood answered by Redis's deny cache: internal/test/redissuite).
func TestDeniedPathAllocs(t *testing.T) {
	// On Redis: internal/test/redissuite's DeniedPathAllocs.
	testkit.DeniedPathAllocs(t, testkit.Memory, core.SourceStore)
}

// TestTopRefusedBound: a flood of 100,000 distinct refused keys, each
// refused once, beside ten keys refused hundreds to thousands of times.
// The limiter's sketch never counts more than its fixed number of keys,
// the store never keeps more than 1,000 keys a minute, and the ten heavy
// keys still come first with their exact counts.
func TestTopRefusedBound(t *testing.T) {
	// On Redis, in parallel: internal/test/redissuite's TopRefusedBound.
	t.Run(testkit.Memory.Name, func(t *testing.T) {
		l := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("top-bound-memory", testkit.PerHour(1)), core.WithTimeout(testkit.StoreTimeout))
		rf := testkit.NewRefusedFlood(l)
		checkSketch := func() {
			if n, most := core.RefusedCounted(l); n > most || most > 256 {
				t.Fatalf("the sketch counts %d keys of at most %d; want at most 256", n, most)
			}
		}
		// Flushed every 500 rounds (5,000 single keys), as the timer
		// would every 5 s at 1,000 refusals a second.
		const every = 500
		ctx := context.Background()
		for r := range testkit.FloodRounds {
			rf.Round(t, r)
			if r%every == every-1 {
				checkSketch()
				if err := core.FlushRefused(ctx, l); err != nil {
					t.Fatal(err)
				}
			}
		}
		if got := rf.Top(t); !reflect.DeepEqual(got, rf.Heavy) {
			t.Errorf("the top %d after the flood = %v\nwant %v", len(rf.Heavy), got, rf.Heavy)
		}
	})
}

// refusalsDown is a memory store whose refusal counts cannot be added.
type refusalsDown struct{ *core.MemoryStore }

func (refusalsDown) AddRefused(context.Context, string, []driver.RefusedKey) error {
	return errors.New("store down")
}

// A flush of the top refused keys that the limiter's timer runs on its
// own is not silent when it fails: an EventStoreError reports it.
func TestTopRefusedFlushFailureReported(t *testing.T) {
	t.Parallel()
	events := &testkit.Events{}
	l := testkit.Limiter(t, refusalsDown{core.NewMemoryStore()}, testkit.Policy("flush-down", testkit.PerHour(1)),
		core.WithRefusedEvery(time.Millisecond), core.WithObserver(events))
	ctx := context.Background()
	for range 2 {
		if _, err := l.Allow(ctx, "k"); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); events.Count(core.EventStoreError) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no EventStoreError 10 s after a refusal whose flush fails")
		}
	}
	err := events.Of(core.EventStoreError)[0].Err
	if err == nil || !strings.Contains(err.Error(), `policy "flush-down": adding its top refused keys to the store: store down`) {
		t.Errorf("the failed flush's error = %v, want it to name the policy, the flush and the cause", err)
	}
}
