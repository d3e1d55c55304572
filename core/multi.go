package core

import (
	"context"
	"fmt"
)

// Check is one limit of a combined decision: n units for key on Limiter.
type Check struct {
	Limiter *Limiter
	Key     string
	// N is the units asked for; 1 when 0.
	N int64
}

// AllowAll decides several limits as one: the request is admitted only if
// every check admits it, and a request denied by one check consumes
// nothing from the others (SMS: per phone AND per IP AND a global cap).
// The checks are decided in order, each in its own store call, so their
// keys may live in different Redis Cluster slots: each admission is a
// reservation, refunded when a later check denies.
//
// The decisions come in the order of the checks and stop at the first
// denial, which is then the last one; the request was admitted when the
// last decision is Allowed and there is one per check. Errors are as for
// [Limiter.AllowN]; on an error every admission made is refunded.
func AllowAll(ctx context.Context, checks ...Check) ([]Decision, error) {
	ds := make([]Decision, 0, len(checks))
	for i, c := range checks {
		if c.Limiter == nil {
			refund(ctx, checks, ds)
			return nil, fmt.Errorf("ratekit: AllowAll: checks[%d].Limiter is nil: %w", i, ErrInvalidPolicy)
		}
		n := c.N
		if n == 0 {
			n = 1
		}
		d, err := c.Limiter.AllowN(ctx, c.Key, n)
		if err != nil {
			refund(ctx, checks, ds)
			return nil, fmt.Errorf("ratekit: AllowAll: checks[%d]: %w", i, err)
		}
		ds = append(ds, d)
		if !d.Allowed {
			refund(ctx, checks, ds[:i])
			return ds, nil
		}
	}
	return ds, nil
}

// refund gives back the admissions ds of checks, best effort: a failed
// refund leaves a unit counted, which can only under-admit.
func refund(ctx context.Context, checks []Check, ds []Decision) {
	ctx = context.WithoutCancel(ctx)
	for i, d := range ds {
		_ = checks[i].Limiter.Refund(ctx, d)
	}
}
