package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// TestDenyCacheCost: a denial cached for one cost does not answer a
// larger one, whose wait is longer.
func TestDenyCacheCost(t *testing.T) {
	clock := newTestClock()
	l := testkit.Limiter(t, remote{core.NewMemoryStore()}, core.Policy{Name: "cost", Rules: []core.Rule{{Limit: 5, Window: time.Minute}}},
		core.WithClock(clock.Now))
	ctx := context.Background()
	for _, n := range []int64{2, 2, 1} {
		if d, _ := l.AllowN(ctx, "k", n); !d.Allowed {
			t.Fatalf("AllowN(%d) = %+v, want allowed", n, d)
		}
		clock.Add(10 * time.Second)
	}
	// Now 30 s in: the first 2 units leave at 60 s, the next 2 at 70 s.
	if d, _ := l.AllowN(ctx, "k", 2); d.Allowed || d.RetryAfter != 30*time.Second {
		t.Fatalf("AllowN(2) = %+v, want denied, RetryAfter 30s", d)
	}
	d, _ := l.AllowN(ctx, "k", 3)
	if d.Allowed || d.RetryAfter != 40*time.Second || d.Source != core.SourceStore {
		t.Errorf("AllowN(3) after a cached denial of 2 = %+v, want the store's denial, RetryAfter 40s", d)
	}
}

// remote hides that a store is a MemoryStore, so that the limiter treats
// it as a remote store, with a deny cache.
type remote struct{ core.Store }
