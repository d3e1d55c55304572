package rueidisstore

import (
	"context"
	"fmt"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redislib"
)

// The leases of a key are one sorted set in the key's slot,
// <prefix>:<policy>:{<key>}:lease, each unit of a lease a member scored by
// its expiry by the server's clock; a lease not renewed for its TTL is
// dropped by the next take, and the key expires when its last lease does.

// TakeLease implements [core.Leases].
func (s *Store) TakeLease(ctx context.Context, l core.Lease) (ok bool, held int64, err error) {
	c, err := s.lease(ctx, l, redislib.OpTake)
	if err != nil {
		return false, 0, err
	}
	ok, held = c.Allowed, c.Used
	redislib.Put(c)
	return ok, held, nil
}

// HeldLeases implements [core.Leases].
func (s *Store) HeldLeases(ctx context.Context, l core.Lease) (int64, error) {
	l.N = 1
	c, err := s.lease(ctx, l, redislib.OpPeek)
	if err != nil {
		return 0, err
	}
	held := c.Used
	redislib.Put(c)
	return held, nil
}

// ReleaseLease implements [core.Leases].
func (s *Store) ReleaseLease(ctx context.Context, l core.Lease) error {
	c, err := s.lease(ctx, l, redislib.OpRefund)
	if err != nil {
		return err
	}
	redislib.Put(c)
	return nil
}

// lease runs one lease operation and returns its answered call; the
// caller puts it back.
func (s *Store) lease(ctx context.Context, l core.Lease, op byte) (*redislib.Call, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("ratekit: rueidis store: %w", err)
	}
	c := redislib.Get()
	c.Lease(s.prefix, l, op, s.cluster)
	if err := s.do(ctx, c); err != nil {
		// The caller gave up; the flight still owns c.
		return nil, fmt.Errorf("ratekit: rueidis store: %w", err)
	}
	if c.Err != nil {
		err := c.Err
		redislib.Put(c)
		return nil, fmt.Errorf("ratekit: rueidis store: %w", err)
	}
	return c, nil
}

// RenewLeases implements [core.Leases]: the renewals go in one round trip,
// one script call per slot.
func (s *Store) RenewLeases(ctx context.Context, ls []core.Lease, held []bool) error {
	calls := make([]*redislib.Call, len(ls))
	for i, l := range ls {
		calls[i] = redislib.Get()
		calls[i].Lease(s.prefix, l, redislib.OpRenew, s.cluster)
	}
	s.flight(ctx, calls)
	var first error
	for i, c := range calls {
		held[i] = c.Err == nil && c.Allowed
		if c.Err != nil && first == nil {
			first = c.Err
		}
		redislib.Put(c)
	}
	if first != nil {
		return fmt.Errorf("ratekit: rueidis store: renewing leases: %w", first)
	}
	return nil
}
