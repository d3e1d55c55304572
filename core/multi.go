package core

import (
	"context"
	"fmt"
)

// Claim is one limit of a combined decision: N units for Key on Limiter.
type Claim struct {
	Limiter *Limiter
	Key     string
	// N is the units asked for; 1 when 0.
	N int64
}

// AllowAll decides several limits as one: the request is admitted only if
// every claim is admitted, and a request denied by one consumes nothing
// from the others (SMS: per phone AND per IP AND a global cap). The claims
// are decided in order, each in its own store call, so their keys may
// live in different Redis Cluster slots: each admission is a reservation,
// refunded when a later claim is denied.
//
// The decisions come in the order of the claims and stop at the first
// denial (or challenge, [Decision.Challenged]), which is then the last
// one; the request was admitted when the last decision is Allowed and
// there is one per claim. Errors are as for
// [Limiter.AllowN]; on an error every admission made is refunded.
func AllowAll(ctx context.Context, claims ...Claim) ([]Decision, error) {
	ds := make([]Decision, 0, len(claims))
	for i, c := range claims {
		if c.Limiter == nil {
			refundAll(ctx, ds)
			return nil, fmt.Errorf("ratekit: AllowAll: claims[%d].Limiter is nil: %w", i, ErrInvalidPolicy)
		}
		n := c.N
		if n == 0 {
			n = 1
		}
		d, err := c.Limiter.AllowN(ctx, c.Key, n)
		if err != nil {
			refundAll(ctx, ds)
			return nil, fmt.Errorf("ratekit: AllowAll: claims[%d]: %w", i, err)
		}
		ds = append(ds, d)
		if !d.Allowed {
			refundAll(ctx, ds[:i])
			return ds, nil
		}
	}
	return ds, nil
}

// refundAll gives back the admissions ds, best effort: a failed refund
// leaves a unit counted, which can only under-admit.
func refundAll(ctx context.Context, ds []Decision) {
	ctx = context.WithoutCancel(ctx)
	for i := range ds {
		_ = ds[i].Refund(ctx)
	}
}
