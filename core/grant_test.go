package core_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// TestGrantFleet: grants on the MemoryStore. On Redis, two instances each
// on a store of its own: internal/test/redissuite's GrantFleet.
func TestGrantFleet(t *testing.T) {
	testkit.GrantFleet(t, testkit.Memory)
}

// TestGrantExpiresOnClock: a grant ends at its Until by the limiter's
// clock, and is refused beyond 30 days.
func TestGrantExpiresOnClock(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	l := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "p", Rules: []core.Rule{{Limit: 2, Window: 24 * time.Hour}}}, core.WithClock(clock))
	ctx := context.Background()
	if err := l.Grant(ctx, "k", core.Grant{Extra: 3, Until: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	got := 0
	for range 10 {
		if d, _ := l.Allow(ctx, "k"); d.Allowed {
			got++
		}
	}
	if got != 5 {
		t.Fatalf("admitted %d with 3 more, want 5", got)
	}
	now = now.Add(time.Hour)
	if d, _ := l.Peek(ctx, "k"); d.Grant != nil || d.Limit != 2 {
		t.Fatalf("Peek at Until = %+v (grant %+v), want no grant, Limit 2", d, d.Grant)
	}
	if err := l.Grant(ctx, "k", core.Grant{Extra: 1, Until: now.Add(31 * 24 * time.Hour)}); !errors.Is(err, core.ErrInvalidPolicy) || !strings.Contains(err.Error(), "30 days") {
		t.Errorf("Grant 31 days away = %v, want ErrInvalidPolicy naming 30 days", err)
	}
}

func TestGrantInvalid(t *testing.T) {
	ctx := context.Background()
	until := time.Now().Add(time.Hour)
	log := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "log", Rules: []core.Rule{{Limit: 90_000, Window: time.Hour}}})
	inflight := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "fl", InFlight: 3})
	shards := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "sh", Shards: 2, Rules: []core.Rule{{Limit: 10, Window: time.Hour}}})
	for _, tc := range []struct {
		l    *core.Limiter
		g    core.Grant
		want string
	}{
		{log, core.Grant{Extra: -1, Until: until}, "negative"},
		{log, core.Grant{Until: until}, "Extra units or Exempt"},
		{log, core.Grant{Extra: 1, Exempt: true, Until: until}, "Extra units or Exempt"},
		{log, core.Grant{Extra: 20_000, Until: until}, "SlidingLog"},
		{log, core.Grant{Extra: 1, Until: until, Note: strings.Repeat("x", 257)}, "Note"},
		{inflight, core.Grant{Extra: 1, Until: until}, "InFlight"},
		{shards, core.Grant{Extra: 1, Until: until}, "Shards"},
	} {
		if err := tc.l.Grant(ctx, "k", tc.g); !errors.Is(err, core.ErrInvalidPolicy) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Grant(%+v) = %v, want ErrInvalidPolicy naming %q", tc.l.Policy().Name, tc.g, err, tc.want)
		}
	}
}

// TestGrantAudit: a grant and a revocation each log one line, naming
// who, what, when and until.
func TestGrantAudit(t *testing.T) {
	var buf bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })
	l := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "api", Rules: []core.Rule{{Limit: 2, Window: time.Hour}}})
	until := time.Now().Add(2 * time.Hour).Truncate(time.Second).UTC()
	if err := l.Grant(context.Background(), "acme", core.Grant{Extra: 10000, Until: until, By: "ann", Note: "launch day"}); err != nil {
		t.Fatal(err)
	}
	if err := l.Grant(context.Background(), "acme", core.Grant{By: "bob"}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("audit: %d lines, want 2:\n%s", len(lines), buf.String())
	}
	for _, want := range []string{"msg=\"ratekit: grant\"", "policy=api", "key=acme", "extra=10000", "exempt=false",
		"until=" + until.Format(time.RFC3339), "by=ann", "note=\"launch day\"", "time="} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("grant audit line %q lacks %q", lines[0], want)
		}
	}
	for _, want := range []string{"msg=\"ratekit: grant revoked\"", "policy=api", "key=acme", "by=bob"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("revocation audit line %q lacks %q", lines[1], want)
		}
	}
}

// TestPolicyListsInvalid: a bad entry of Allow or Deny fails NewLimiter,
// naming the field and the entry.
func TestPolicyListsInvalid(t *testing.T) {
	for _, tc := range []struct {
		p    core.Policy
		want string
	}{
		{core.Policy{Name: "p", Rules: []core.Rule{{Limit: 1, Window: time.Second}}, Allow: []string{"10.0.0.0/33"}}, `Allow: entry 0 ("10.0.0.0/33")`},
		{core.Policy{Name: "p", Rules: []core.Rule{{Limit: 1, Window: time.Second}}, Deny: []string{"a", ""}}, "Deny: entry 1"},
	} {
		_, err := core.NewLimiter(core.NewMemoryStore(), tc.p)
		if !errors.Is(err, core.ErrInvalidPolicy) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewLimiter(%v / %v) = %v, want ErrInvalidPolicy naming %q", tc.p.Allow, tc.p.Deny, err, tc.want)
		}
	}
}

// TestGrantTiers: a grant adds to the limits of the key's tier, and the
// policy's lists decide before any tier.
func TestGrantTiers(t *testing.T) {
	resolve := func(_ context.Context, key string) (string, error) {
		if strings.HasPrefix(key, "pro-") {
			return "pro", nil
		}
		return "", nil
	}
	l := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "tiered", Rules: []core.Rule{{Limit: 2, Window: time.Hour}},
		Deny: []string{"pro-banned"}},
		core.WithTiers(resolve, map[string][]core.Rule{"pro": {{Limit: 5, Window: time.Hour}}}))
	ctx := context.Background()
	for key, want := range map[string]int{"pro-app": 5 + 3, "free-app": 2 + 3} {
		if err := l.Grant(ctx, key, core.Grant{Extra: 3, Until: time.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if d, err := l.Peek(ctx, key); err != nil || d.Grant == nil || d.Limit != int64(want) {
			t.Fatalf("Peek(%s) = %+v (grant %+v), %v; want the grant, Limit %d", key, d, d.Grant, err, want)
		}
		got := 0
		for range 12 {
			if d, _ := l.Allow(ctx, key); d.Allowed {
				got++
			}
		}
		if got != want {
			t.Errorf("%s: admitted %d with 3 more, want %d", key, got, want)
		}
	}
	if d, err := l.Peek(ctx, "pro-banned"); err != nil || !d.Listed || d.Allowed {
		t.Errorf("Peek(pro-banned) = %+v, %v; want denied by the Deny list", d, err)
	}
}

// countingStore counts the Takes and Peeks that reach a store.
type countingStore struct {
	core.Store
	calls atomic.Int64
}

func (s *countingStore) Take(ctx context.Context, q driver.Query) (driver.Result, error) {
	s.calls.Add(1)
	return s.Store.Take(ctx, q)
}

func (s *countingStore) Peek(ctx context.Context, q driver.Query) (driver.Result, error) {
	s.calls.Add(1)
	return s.Store.Peek(ctx, q)
}

// TestPolicyLists: a key on Deny is refused and one on Allow admitted,
// whatever the rules, without a call to the store and counting nothing;
// Deny wins; other keys are decided by the store as ever.
func TestPolicyLists(t *testing.T) {
	st := &countingStore{Store: core.NewMemoryStore()}
	l := testkit.Limiter(t, st, core.Policy{Name: "lists", Rules: []core.Rule{{Limit: 1, Window: time.Hour}},
		Allow: []string{"10.0.0.0/8", "svc", "192.0.2.1"}, Deny: []string{"192.0.2.0/24", "2001:db8::/32"}})
	ctx := context.Background()
	for _, tc := range []struct {
		key     string
		allowed bool
	}{{"10.9.8.7", true}, {"svc", true}, {"192.0.2.1", false}, {"2001:db8:1:2::/64", false}, {"2001:DB8::9", false}} {
		for range 3 {
			d, err := l.Allow(ctx, tc.key)
			if err != nil || !d.Listed || d.Allowed != tc.allowed || d.Source != core.SourceStore {
				t.Fatalf("Allow(%q) = %+v, %v; want Listed, allowed %v", tc.key, d, err, tc.allowed)
			}
			if !tc.allowed && (d.RetryAfter != time.Hour || d.Remaining != 0) {
				t.Fatalf("Allow(%q) = %+v; want RetryAfter 1h, nothing remaining", tc.key, d)
			}
			if tc.allowed && d.Remaining != 1 {
				t.Fatalf("Allow(%q) = %+v; want Remaining 1: nothing counted", tc.key, d)
			}
		}
		if d, err := l.Peek(ctx, tc.key); err != nil || !d.Listed || d.Allowed != tc.allowed {
			t.Fatalf("Peek(%q) = %+v, %v; want Listed, allowed %v", tc.key, d, err, tc.allowed)
		}
	}
	if n := st.calls.Load(); n != 0 {
		t.Fatalf("the store saw %d calls for listed keys, want none", n)
	}
	if d, _ := l.Allow(ctx, "11.0.0.1"); !d.Allowed || d.Listed || st.calls.Load() != 1 {
		t.Fatalf("Allow(11.0.0.1) = %+v after %d store calls; want admitted by the store", d, st.calls.Load())
	}
}
