package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// TestLimiterCheck: Limiter.Check passes a MemoryStore, and reports
// nothing to the limiter's observers.
func TestLimiterCheck(t *testing.T) {
	p := core.Policy{Name: "check", Rules: []core.Rule{{Limit: 1, Window: time.Minute}}}
	t.Run("memory", func(t *testing.T) {
		obs := &testkit.EventCounts{}
		l := testkit.Limiter(t, core.NewMemoryStore(), p, core.WithObserver(obs))
		if err := l.Check(context.Background()); err != nil {
			t.Errorf("Check() on a MemoryStore = %v, want nil", err)
		}
		if got := obs.Count(core.EventStoreCheck); got != 0 {
			t.Errorf("EventStoreCheck count = %d, want 0", got)
		}
		if got := core.EventStoreCheck.String(); got != "store_check" {
			t.Errorf("EventStoreCheck.String() = %q", got)
		}
	})
	// A store whose check fails: internal/test/redissuite's LimiterCheck, on a
	// Redis that can evict limiter keys.
}
