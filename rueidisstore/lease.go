package rueidisstore

import (
	"context"

	"github.com/ratekit/ratekit/core"
)

// TakeLease implements [core.Leases].
func (s *Store) TakeLease(ctx context.Context, l core.Lease) (ok bool, held int64, err error) {
	return s.leases.TakeLease(ctx, l)
}

// HeldLeases implements [core.Leases].
func (s *Store) HeldLeases(ctx context.Context, l core.Lease) (int64, error) {
	return s.leases.HeldLeases(ctx, l)
}

// ReleaseLease implements [core.Leases].
func (s *Store) ReleaseLease(ctx context.Context, l core.Lease) error {
	return s.leases.ReleaseLease(ctx, l)
}

// RenewLeases implements [core.Leases]: the renewals go in one round trip,
// one script call per slot.
func (s *Store) RenewLeases(ctx context.Context, ls []core.Lease, held []bool) error {
	return s.leases.RenewLeases(ctx, ls, held)
}
