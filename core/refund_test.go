package core_test

import (
	"testing"

	"github.com/ratekit/ratekit/internal/test/testkit"
)

// TestRefundOnce: a decision's units come back once, however often its
// Refund is called, for both algorithms; and a refund gives back only
// the units of its own decision, not those of another admitted at the
// same time.
func TestRefundOnce(t *testing.T) {
	// Redis: internal/test/redissuite's RefundOnce.
	testkit.RefundOnce(t, testkit.Memory)
}
