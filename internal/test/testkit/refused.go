package testkit

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/race"
)

// The refusals a limiter keeps (Limiter.TopRefused), on every store.

// Admit asks l for key once and fails t unless it is admitted.
func Admit(t testing.TB, l *core.Limiter, key string) {
	t.Helper()
	if d, err := l.Allow(context.Background(), key); err != nil || !d.Allowed {
		t.Fatalf("Allow(%q) = %+v, %v; want admitted", key, d, err)
	}
}

// Refuse asks l for key times times and fails t unless every answer is a
// denial of the store or of the deny cache; it returns how many came from
// the cache.
func Refuse(t testing.TB, l *core.Limiter, key string, times int) (cached int) {
	t.Helper()
	for range times {
		d, err := l.Allow(context.Background(), key)
		if err != nil || d.Allowed || d.Source.Fallback() {
			t.Fatalf("Allow(%q) = %+v, %v; want a denial of the store or its cache", key, d, err)
		}
		if d.Source == core.SourceCache {
			cached++
		}
	}
	return cached
}

// TopRefused returns l.TopRefused(n), failing t on an error.
func TopRefused(t testing.TB, l *core.Limiter, n int) []core.RefusedKey {
	t.Helper()
	top, err := l.TopRefused(context.Background(), n)
	if err != nil {
		t.Fatalf("TopRefused(%d): %v", n, err)
	}
	return top
}

// TopRefusedFleet checks on b that two instances refusing different
// counts of several keys, most of them answered by their deny caches on
// a shared store, add up: once the second has added its counts,
// TopRefused on either returns the exact sums, most refused first and
// ties in key order.
func TopRefusedFleet(t *testing.T, b Backend) {
	ls := Fleet(t, 2, b, Policy("top-fleet", PerHour(1)))
	a, bb := ls[0], ls[1]
	refusals := []struct {
		key  string
		a, b int
	}{{"alice", 5, 4}, {"bob", 1, 7}, {"carol", 3, 3}, {"dave", 0, 6}, {"erin", 2, 0}}
	cached := 0
	for _, r := range refusals {
		Admit(t, a, r.key)
		cached += Refuse(t, a, r.key, r.a)
		cached += Refuse(t, bb, r.key, r.b)
	}
	if b.Name != Memory.Name && cached == 0 {
		t.Fatal("no denial came from a deny cache: the test does not cover the cache's count")
	}
	// Add bb's refusals to the store, as its timer would: TopRefused adds
	// the asking instance's first.
	if _, err := bb.TopRefused(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	want := []core.RefusedKey{{Key: "alice", Refusals: 9}, {Key: "bob", Refusals: 8}, {Key: "carol", Refusals: 6},
		{Key: "dave", Refusals: 6}, {Key: "erin", Refusals: 2}}
	for i, l := range ls {
		if got := TopRefused(t, l, 10); !reflect.DeepEqual(got, want) {
			t.Errorf("instance %d: TopRefused(10) = %v, want %v", i, got, want)
		}
	}
	if got := TopRefused(t, bb, 3); !reflect.DeepEqual(got, want[:3]) {
		t.Errorf("TopRefused(3) = %v, want %v", got, want[:3])
	}
	if got := TopRefused(t, a, 0); got != nil {
		t.Errorf("TopRefused(0) = %v, want nothing", got)
	}
}

// TopRefusedShards checks on b that the denials of a sharded key count
// under the key as the app gave it, without a shard's suffix.
func TopRefusedShards(t *testing.T, b Backend) {
	p := Policy("top-shards", PerHour(4))
	p.Shards = 4
	l := Fleet(t, 1, b, p)[0]
	for range 4 {
		Admit(t, l, "hot")
	}
	Refuse(t, l, "hot", 8)
	want := []core.RefusedKey{{Key: "hot", Refusals: 8}}
	if got := TopRefused(t, l, 5); !reflect.DeepEqual(got, want) {
		t.Errorf("TopRefused = %v, want %v", got, want)
	}
}

// TopRefusedTiers checks on b that denials count whichever tier decided
// them.
func TopRefusedTiers(t *testing.T, b Backend) {
	tiers := map[string][]core.Rule{"pro": {PerHour(2)}}
	resolve := func(_ context.Context, key string) (string, error) {
		if strings.HasPrefix(key, "pro-") {
			return "pro", nil
		}
		return "", nil
	}
	l := Fleet(t, 1, b, Policy("top-tiers", PerHour(1)), core.WithTiers(resolve, tiers))[0]
	Admit(t, l, "free-1")
	Refuse(t, l, "free-1", 2)
	Admit(t, l, "pro-1")
	Admit(t, l, "pro-1")
	Refuse(t, l, "pro-1", 3)
	want := []core.RefusedKey{{Key: "pro-1", Refusals: 3}, {Key: "free-1", Refusals: 2}}
	if got := TopRefused(t, l, 5); !reflect.DeepEqual(got, want) {
		t.Errorf("TopRefused = %v, want %v", got, want)
	}
}

// DeniedPathAllocs checks on b that counting refusals costs the denied
// path no allocation, for a hot key and for denials spread over 1,000
// keys (a subtest each); src is where b's denials
// come from once the flood is under way (the store on the memory store,
// the deny cache on a shared one). It skips with coverage or the race
// detector, which allocate.
func DeniedPathAllocs(t *testing.T, b Backend, src core.Source) {
	if testing.CoverMode() != "" || race.Enabled {
		t.Skip("allocations are counted without coverage or the race detector")
	}
	ctx := context.Background()
	keys := BenchKeys(1000)
	for _, tc := range []struct {
		name string
		keys []string
	}{
		{"hot", keys[:1]},
		{"spread", keys},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := Fleet(t, 1, b, Policy("allocs-"+tc.name, PerHour(1)), core.WithTimeout(StoreTimeout))[0]
			for _, k := range tc.keys {
				Admit(t, l, k)
				Refuse(t, l, k, 1)
			}
			refused := int64(1) // each key's, so far
			if src == core.SourceCache {
				WaitUntil(t, "the deny cache answers", func() bool {
					d, _ := l.Allow(ctx, tc.keys[0])
					refused++
					return d.Source == core.SourceCache
				})
			}
			i := 0
			allocs := testing.AllocsPerRun(10_000, func() {
				d, err := l.Allow(ctx, tc.keys[i%len(tc.keys)])
				i++
				if err != nil || d.Allowed || d.Source != src {
					t.Fatalf("Allow = %+v, %v; want a denial, Source %v", d, err, src)
				}
			})
			if allocs != 0 {
				t.Errorf("%v allocations per denial, want 0", allocs)
			}
			// One more run than asked for: AllocsPerRun warms up.
			want := []core.RefusedKey{{Key: tc.keys[0], Refusals: refused + 10_001}}
			if top := TopRefused(t, l, 1); len(tc.keys) == 1 && !reflect.DeepEqual(top, want) {
				t.Errorf("TopRefused(1) = %v after the flood, want %v", top, want)
			}
		})
	}
}

// The flood of the TopRefusedBound tests: 100,000 distinct keys, each
// refused once, beside ten heavy keys refused hundreds to thousands of
// times.
const (
	floodHeavy   = 10
	floodSingles = 10 // per round

	// FloodRounds is how many rounds a [RefusedFlood] runs: 100,000
	// single keys in all.
	FloodRounds = 10_000
)

// A RefusedFlood is the flood of the TopRefusedBound tests on one
// limiter of a policy of 1 an hour: its rounds run in any order, from
// any goroutines.
type RefusedFlood struct {
	l *core.Limiter
	// Heavy are the heavy keys, each with the refusals it gets once
	// every round ran, most refused first.
	Heavy  []core.RefusedKey
	denied [floodHeavy]atomic.Int64
}

// NewRefusedFlood returns the flood on l.
func NewRefusedFlood(l *core.Limiter) *RefusedFlood {
	f := &RefusedFlood{l: l, Heavy: make([]core.RefusedKey, floodHeavy)}
	// Heavy key i is asked for in every (i+1)th round, first of the round;
	// the first ask is admitted.
	for i := range f.Heavy {
		f.Heavy[i] = core.RefusedKey{Key: fmt.Sprintf("heavy-%d", i), Refusals: int64((FloodRounds+i)/(i+1)) - 1}
	}
	return f
}

// Round runs round r of the flood: the heavy keys of the round, then 10
// new keys, each admitted then refused.
func (f *RefusedFlood) Round(t testing.TB, r int) {
	ctx := context.Background()
	for i := range f.Heavy {
		if r%(i+1) == 0 {
			d, err := f.l.Allow(ctx, f.Heavy[i].Key)
			if err != nil {
				t.Error(err)
			}
			if !d.Allowed {
				f.denied[i].Add(1)
			}
		}
	}
	for j := range floodSingles {
		key := fmt.Sprintf("single-%d-%d", r, j)
		for range 2 { // admitted, then refused
			if _, err := f.l.Allow(ctx, key); err != nil {
				t.Error(err)
			}
		}
	}
}

// Top checks, once every round ran, that each heavy key was denied as
// often as Heavy says and that TopRefused keeps at most 1,000 keys a
// minute (the run may span a few minutes), and returns the first
// len(Heavy) keys TopRefused reports.
func (f *RefusedFlood) Top(t testing.TB) []core.RefusedKey {
	t.Helper()
	for i := range f.Heavy {
		if n := f.denied[i].Load(); n != f.Heavy[i].Refusals {
			t.Fatalf("%s denied %d times, want %d", f.Heavy[i].Key, n, f.Heavy[i].Refusals)
		}
	}
	all := TopRefused(t, f.l, 1_000_000)
	if len(all) > 3*1000 {
		t.Errorf("TopRefused returned %d keys after the flood; want at most 1,000 a minute", len(all))
	}
	return all[:min(len(f.Heavy), len(all))]
}
