package keyfunc_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/keyfunc"
)

// reasonErr is a reasoned error from another package.
type reasonErr struct{ reason string }

func (e reasonErr) Error() string  { return "other: " + e.reason }
func (e reasonErr) Reason() string { return e.reason }

func TestReason(t *testing.T) {
	t.Parallel()
	_, tooLong := keyfunc.Header("X-Key")(newReq(t, "192.0.2.1:1", "X-Key", strings.Repeat("k", keyfunc.MaxValueLen+1)))
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ""},
		{"plain error", errors.New("x"), ""},
		{"ErrInvalidKey alone", keyfunc.ErrInvalidKey, ""},
		{"BodyTooLarge", keyfunc.BodyTooLarge(10), "request body too large"},
		{"BodyTooLarge wrapped", fmt.Errorf("adapter: %w", keyfunc.BodyTooLarge(10)), "request body too large"},
		{"Header too long", tooLong, "key too long"},
		{"other package", reasonErr{"invalid phone number"}, "invalid phone number"},
		{"other package wrapped", fmt.Errorf("x: %w", reasonErr{"invalid phone number"}), "invalid phone number"},
		{"first in the chain", fmt.Errorf("x: %w: %w", reasonErr{"outer"}, keyfunc.BodyTooLarge(1)), "outer"},
		{"joined", errors.Join(errors.New("x"), keyfunc.BodyTooLarge(1)), "request body too large"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := keyfunc.Reason(tc.err); got != tc.want {
				t.Errorf("Reason(%v) = %q, want %q", tc.err, got, tc.want)
			}
		})
	}
	for _, want := range []error{keyfunc.ErrBodyTooLarge, keyfunc.ErrInvalidKey} {
		if !errors.Is(keyfunc.BodyTooLarge(10), want) {
			t.Errorf("BodyTooLarge does not wrap %v", want)
		}
	}
	if !errors.Is(keyfunc.ErrBodyTooLarge, keyfunc.ErrInvalidKey) {
		t.Error("ErrBodyTooLarge does not wrap ErrInvalidKey")
	}
	if !errors.Is(tooLong, keyfunc.ErrInvalidKey) {
		t.Error("Header's too-long error does not wrap ErrInvalidKey")
	}
}
