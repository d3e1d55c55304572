package core

import (
	"context"
	"errors"
)

// ErrMisconfigured is wrapped by the error a store's Check returns when
// the store is configured so that no decision can succeed until someone
// changes its configuration: for Redis a wrong password or ACL user, a
// database index the server does not have, an ACL that forbids the
// commands the store sends (its Lua functions or scripts, PUBLISH on its
// invalidation channel), a server that runs no Lua, or a key the store
// keeps holding a value of another type. Such a store is not down and will
// not come back by itself: report it and stop, rather than wait for it as
// for a store that does not answer yet (whose error wraps neither this
// nor [ErrUnsafeEviction]).
var ErrMisconfigured = errors.New("store misconfigured")

// Check asks the limiter's store whether it is configured so that limits
// hold, if the store is a [Checker] (a [MemoryStore] is not: it passes),
// and reports a failed check to the limiter's observers as an
// [EventStoreCheck] event. It returns the store's error: for the Redis
// drivers, one wrapping [ErrMisconfigured] for a server no decision can
// succeed on, or their own error for a server that can evict limiter keys.
// Call it once at start-up, with a context that bounds it (the limiter's
// timeout does not apply); whether to refuse to start is the caller's
// choice.
func (l *Limiter) Check(ctx context.Context) error {
	c, ok := l.store.(Checker)
	if !ok {
		return nil
	}
	err := c.Check(ctx)
	if err != nil {
		l.emit(ctx, Event{Kind: EventStoreCheck, Err: err})
	}
	return err
}
