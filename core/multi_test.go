package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

func TestAllowAllDeniedConsumesNothing(t *testing.T) {
	store := core.NewMemoryStore()
	phone := testkit.Limiter(t, store, testkit.Policy("sms-phone", core.Rule{Limit: 5, Window: time.Hour}))
	ip := testkit.Limiter(t, store, testkit.Policy("sms-ip", core.Rule{Limit: 2, Window: time.Hour}))
	global := testkit.Limiter(t, store, testkit.Policy("sms-global", core.Rule{Limit: 100, Window: time.Hour}))
	ctx := context.Background()
	send := func(number string) bool {
		ds, err := core.AllowAll(ctx,
			core.Claim{Limiter: phone, Key: number},
			core.Claim{Limiter: ip, Key: "198.51.100.7"},
			core.Claim{Limiter: global, Key: "all"},
		)
		if err != nil {
			t.Fatalf("AllowAll: %v", err)
		}
		return len(ds) == 3 && ds[2].Allowed
	}
	got := []bool{send("+8613800138000"), send("+8613800138001"), send("+8613800138002"), send("+8613800138003")}
	want := []bool{true, true, false, false}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("send #%d admitted = %v, want %v", i, got[i], want[i])
		}
	}
	// The two sends the IP rule denied took nothing from their phones or
	// the global cap.
	for _, n := range []string{"+8613800138002", "+8613800138003"} {
		if d, _ := phone.Peek(ctx, n); d.Remaining != 5 {
			t.Errorf("phone %s Remaining = %d after a denied send, want 5", n, d.Remaining)
		}
	}
	if d, _ := global.Peek(ctx, "all"); d.Remaining != 98 {
		t.Errorf("global Remaining = %d, want 98 (two admitted sends)", d.Remaining)
	}
}

func TestAllowAllNilLimiter(t *testing.T) {
	l := testkit.Limiter(t, core.NewMemoryStore(), testkit.Policy("a", core.Rule{Limit: 1, Window: time.Minute}))
	ctx := context.Background()
	if _, err := core.AllowAll(ctx, core.Claim{Limiter: l, Key: "k"}, core.Claim{Key: "k"}); err == nil {
		t.Fatal("AllowAll with a nil limiter: want an error")
	}
	if d, _ := l.Peek(ctx, "k"); d.Remaining != 1 {
		t.Errorf("after a failed AllowAll Remaining = %d, want 1 (refunded)", d.Remaining)
	}
}
