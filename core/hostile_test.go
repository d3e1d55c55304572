package core_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// TestHostileRandomKeyFlood: a flood of keys each seen once leaves memory
// bounded: the MemoryStore sweeps keys whose window has passed as it is
// used. (That every Redis key has a TTL is internal/test/redissuite's
// HostileRandomKeyFlood.)
//
// The bounds follow from the sweep, not from how fast the machine runs
// the flood: the flood's clock steps by a fixed amount per request, so
// that exactly window/step keys are within their window at any moment
// (live). The store spreads a policy's keys over 64 shards; each shard
// looks at 32 of its keys every 16 of its decisions, two a decision, in
// turn, while the flood adds one: so a shard holds at most about as many
// keys past their window as within it, plus a sweep's 32. The store holds
// at most 2 x live + 64 x 32 keys.
//
// Once the window has passed, a policy that sees no more traffic is
// swept by the store's round (Store.tick): every 16 decisions of a shard
// of any policy, 64 keys of the next shard in turn, the 64 shards of each
// policy one after the other. With two policies, every 128 rounds visit
// each shard of the flood's policy once, so 128 x ceil(n/64) rounds empty
// a policy of n expired keys; ordinary traffic of another policy on 10
// keys (at most 10 shards) makes one round every 16 of its decisions on a
// shard, all but 7 of each shard's. After that many decisions the store
// holds the 10 keys of that traffic and nothing else.
func TestHostileRandomKeyFlood(t *testing.T) {
	const (
		window = 20 * time.Millisecond
		step   = 10 * time.Microsecond
		live   = int(window / step) // keys within their window at any moment
		flood  = 50000
		shards = 64 // of a policy (core/internal/memstore)
		sweep  = 32 // keys a shard looks at every 16 of its decisions
		round  = 64 // keys of a shard one round of the store looks at
	)
	clock := newTestClock()
	st := core.NewMemoryStore()
	l := testkit.Limiter(t, st, core.Policy{Name: "flood", Rules: []core.Rule{{Limit: 1, Window: window}}}, core.WithClock(clock.Now))
	ctx := context.Background()
	peak := 0
	for i := range flood {
		clock.Add(step)
		if d, err := l.Allow(ctx, "r"+strconv.Itoa(i)); err != nil || !d.Allowed {
			t.Fatalf("Allow(r%d) = %+v, %v; want admitted (a new key)", i, d, err)
		}
		peak = max(peak, core.MemoryLen(st))
	}
	atEnd := core.MemoryLen(st)
	if bound := 2*live + shards*sweep; peak > bound {
		t.Errorf("the store held %d keys during a flood of %d keys, %d live at a time: want at most %d (2 x live + %d x %d)",
			peak, flood, live, bound, shards, sweep)
	}

	// Then the window passes and ordinary traffic of another policy on
	// the same store, on a few keys, sweeps the rest.
	clock.Add(window)
	const appKeys = 10
	rounds := 2 * shards * ((atEnd + round - 1) / round)
	calls := 16 * (rounds + appKeys)
	app := testkit.Limiter(t, st, core.Policy{Name: "app", Rules: []core.Rule{{Limit: 100_000, Window: time.Minute}}},
		core.WithClock(clock.Now))
	for i := range calls {
		if _, err := app.Allow(ctx, strconv.Itoa(i%appKeys)); err != nil {
			t.Fatal(err)
		}
	}
	after := core.MemoryLen(st)
	t.Logf("%d random keys, %d live at a time: peak %d keys (bound %d), %d at the end, %d after %d calls on %d other keys",
		flood, live, peak, 2*live+shards*sweep, atEnd, after, calls, appKeys)
	if after != appKeys {
		t.Errorf("the store holds %d keys after %d calls on %d other keys, once the flood's %d had expired: want only those %d",
			after, calls, appKeys, atEnd, appKeys)
	}
}

// TestHashAliases: the hash of a long key sent as a key of its own is not
// that key (see testkit.HashAliases; on Redis: redissuite's HashAliases).
func TestHashAliases(t *testing.T) { testkit.HashAliases(t, testkit.Memory) }
