package core_test

import (
	"context"
	"testing"
	"time"
	"unsafe"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// TestKeysCopied: a key handed to the Limiter may live in a buffer that
// the caller reuses once the request is over (fasthttp's values, an
// unsafe conversion). What the Limiter keeps of it (the memory store's
// window, the refusal counts) must keep its text, or a key that changed
// under the store would find a fresh window and pass its limit.
func TestKeysCopied(t *testing.T) {
	ctx := context.Background()
	l := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "copied", Rules: []core.Rule{{Limit: 2, Window: time.Minute}}})
	buf := []byte("user-1")
	reused := unsafe.String(&buf[0], len(buf))
	for i := range 3 {
		d, err := l.Allow(ctx, reused)
		if err != nil {
			t.Fatal(err)
		}
		if want := i < 2; d.Allowed != want {
			t.Fatalf("request %d: allowed %v, want %v", i+1, d.Allowed, want)
		}
	}
	copy(buf, "user-2") // the caller's buffer serves the next request
	d, err := l.Allow(ctx, "user-1")
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed {
		t.Fatal("user-1 was admitted a third time after the caller reused the buffer of its key: the store kept the caller's bytes")
	}
	top, err := l.TopRefused(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(top) != 1 || top[0].Key != "user-1" || top[0].Refusals != 2 {
		t.Fatalf("TopRefused = %+v, want user-1 refused twice", top)
	}
}
