package core

import (
	"context"
	"errors"

	"github.com/ratekit/ratekit/core/driver"
)

// Check asks the limiter's store whether it is configured so that limits
// hold, if the store is a [driver.Checker] (a [MemoryStore] is not: it passes),
// and reports a failed check to the limiter's observers as an
// [EventStoreCheck] event. It returns the store's error: for the Redis
// drivers, one wrapping [ErrMisconfigured] for a server no decision can
// succeed on, or their own error for a server that can evict limiter keys;
// joined, on a store that announces the instances of each policy
// ([driver.Fleet]), with an error naming the other configurations of the
// policy that other instances announce ([EventRulesDiffer]), which wraps
// neither: a deploy that changes a policy's rules has both for a while,
// and once the last old instance stops, Check passes again. The Redis
// drivers announce every policy and read every announcement before their
// Check returns. Call it once at start-up, with a context that bounds it (the limiter's
// timeout does not apply); whether to refuse to start is the caller's
// choice.
func (l *Limiter) Check(ctx context.Context) error {
	c, ok := l.store.(driver.Checker)
	if !ok {
		return nil
	}
	err := c.Check(ctx)
	if err != nil {
		l.emit(ctx, Event{Kind: EventStoreCheck, Err: err})
	}
	return errors.Join(err, l.differing())
}
