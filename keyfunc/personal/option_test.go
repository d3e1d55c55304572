package personal_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/keyfunc/personal"
)

func TestOptionPanics(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		f    func()
	}{
		{"DefaultRegion unknown", func() { personal.DefaultRegion("XX") }},
		{"DefaultRegion long", func() { personal.DefaultRegion(strings.Repeat("A", 100)) }},
		{"MaxBody 0", func() { personal.MaxBody(0) }},
		{"MaxBody negative", func() { personal.MaxBody(-1) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			defer func() {
				msg, _ := recover().(string)
				if !strings.HasPrefix(msg, "ratekit: personal: ") || len(msg) > 100 {
					t.Errorf("panic value %q; want a short message starting with \"ratekit: personal: \"", msg)
				}
			}()
			tc.f()
		})
	}
	// These do not panic.
	personal.DefaultRegion("")
	personal.DefaultRegion("cn")
	personal.MaxBody(1)
}

// TestReason checks that keyfunc.Reason finds the reasons of this
// package's errors, also when wrapped again.
func TestReason(t *testing.T) {
	t.Parallel()
	phone := personal.Phone(personal.Header("X-Phone"), personal.DefaultRegion("CN"))
	_, err := phone(header(t, "X-Phone", "0000000"))
	if got := keyfunc.Reason(err); got != "invalid phone number" {
		t.Errorf("Reason(%v) = %q, want %q", err, got, "invalid phone number")
	}
	wrapped := fmt.Errorf("ratekit: guard: %w", err)
	if got := keyfunc.Reason(wrapped); got != "invalid phone number" {
		t.Errorf("Reason(%v) = %q, want %q", wrapped, got, "invalid phone number")
	}
	if !errors.Is(wrapped, keyfunc.ErrInvalidKey) {
		t.Errorf("%v does not wrap ErrInvalidKey", wrapped)
	}
}
