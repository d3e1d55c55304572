package redislib

import (
	"context"
	"fmt"

	"github.com/ratekit/ratekit/core/driver"
)

// The leases of a key are one sorted set in the key's slot,
// <prefix>:<policy>:{<key>}:lease, each unit of a lease a member scored by
// its expiry by the server's clock; a lease not renewed for its TTL is
// dropped by the next take, and the key expires when its last lease does.

// Leases implements [driver.Leases] for a driver: its calls go through Run
// (one call, waited for on the caller's context) and Flight (several in
// one round trip). Name starts its errors ("redisstore").
type Leases struct {
	Name    string
	Prefix  string
	Cluster bool
	Run     func(ctx context.Context, c *Call) error
	Flight  func(ctx context.Context, calls []*Call)
}

// TakeLease implements [driver.Leases].
func (s *Leases) TakeLease(ctx context.Context, l driver.Lease) (ok bool, held int64, err error) {
	c, err := s.lease(ctx, l, OpTake)
	if err != nil {
		return false, 0, err
	}
	ok, held = c.Allowed, c.Used
	Put(c)
	return ok, held, nil
}

// HeldLeases implements [driver.Leases].
func (s *Leases) HeldLeases(ctx context.Context, l driver.Lease) (int64, error) {
	l.N = 1
	c, err := s.lease(ctx, l, OpPeek)
	if err != nil {
		return 0, err
	}
	held := c.Used
	Put(c)
	return held, nil
}

// ReleaseLease implements [driver.Leases].
func (s *Leases) ReleaseLease(ctx context.Context, l driver.Lease) error {
	c, err := s.lease(ctx, l, OpRefund)
	if err != nil {
		return err
	}
	Put(c)
	return nil
}

// lease runs one lease operation and returns its answered call; the
// caller puts it back.
func (s *Leases) lease(ctx context.Context, l driver.Lease, op byte) (*Call, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", s.Name, err)
	}
	c := Get()
	c.Lease(s.Prefix, l, op, s.Cluster)
	if err := s.Run(ctx, c); err != nil {
		// The caller gave up; the flight still owns c.
		return nil, fmt.Errorf("%s: %w", s.Name, err)
	}
	if c.Err != nil {
		err := c.Err
		Put(c)
		return nil, fmt.Errorf("%s: %w", s.Name, err)
	}
	return c, nil
}

// RenewLeases implements [driver.Leases]: the renewals go in one round trip,
// one script call per slot.
func (s *Leases) RenewLeases(ctx context.Context, ls []driver.Lease, held []bool) error {
	calls := make([]*Call, len(ls))
	for i, l := range ls {
		calls[i] = Get()
		calls[i].Lease(s.Prefix, l, OpRenew, s.Cluster)
	}
	s.Flight(ctx, calls)
	var first error
	for i, c := range calls {
		held[i] = c.Err == nil && c.Allowed
		if c.Err != nil && first == nil {
			first = c.Err
		}
		Put(c)
	}
	if first != nil {
		return fmt.Errorf("%s: renewing leases: %w", s.Name, first)
	}
	return nil
}
