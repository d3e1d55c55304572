package driver

import (
	"context"
	"errors"
	"time"
)

// Grants is implemented by a store that keeps grants: for a while, one key
// of a policy gets more units than the policy's rules give it, or is
// exempt from them ("this customer gets 10,000 more today", "lift this
// address's limit for an hour"). The store reads a key's grant in the same
// atomic step as it decides the key's Takes and Peeks, so a grant set,
// revoked or expired holds at once for every instance that shares the
// store. A limiter's Grant needs it; on a store without it, Grant returns
// an error.
//
// While a key holds a grant with Extra units, a Take or Peek of the key
// decides as if every rule's limit (and the units the store keeps,
// Query.Keep) were Extra higher, and reports those limits in its rule
// states and Extra in [Result].Extra. While it holds an Exempt grant, a
// Take or Peek is allowed, records nothing and reads nothing of the key's
// counts: its rule states report the rules' limits with nothing used, and
// [Result].Exempt is set. A grant changes no lockout: an exempt key is
// admitted through one; a key with Extra units stays refused until it ends.
type Grants interface {
	// SetGrant gives g to key of policy until g.Until, replacing the grant
	// the key held, or revokes the key's grant when g.Until is zero.
	// Every instance's cached denials of the key are invalidated
	// ([Invalidator]).
	SetGrant(ctx context.Context, policy, key string, g Grant) error
	// GrantOf returns the live grant of key under policy, and false when
	// it holds none.
	GrantOf(ctx context.Context, policy, key string) (Grant, bool, error)
}

// Grant is what a [Grants] store keeps for one key of a policy.
type Grant struct {
	// Extra is the units added to every rule's limit; 0 with Exempt.
	Extra int64
	// Exempt makes every request of the key admitted, uncounted.
	Exempt bool
	// Until is when the grant ends by itself (at most [MaxGrant] away).
	Until time.Time
	// By and Note say who granted it and why, for whoever looks it up.
	By, Note string
}

// Bounds of the grants a [Grants] store keeps.
const (
	// MaxGrant is the longest a grant lasts.
	MaxGrant = 30 * 24 * time.Hour
	// MaxGrantExtra is the most units a grant adds to a limit.
	MaxGrantExtra = 1_000_000_000_000
	// MaxGrantText is the most bytes of a grant's By and of its Note.
	MaxGrantText = 256
)

// ErrOlderRelease is wrapped by a store's SetGrant error when it refuses
// a grant because an instance of an older release that reads no grants
// still uses the policy: that instance would admit the key by the rules
// alone. Grant again once it stopped.
var ErrOlderRelease = errors.New("an instance of an older release still uses the policy")
