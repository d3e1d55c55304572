package core

import (
	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/core/internal/memstore"
)

// Store keeps the windows of a [Limiter]: [MemoryStore] in this process,
// or a driver that shares them between the app's instances (redisstore on
// go-redis, rueidisstore on rueidis). It is the contract of package
// [driver], which every store implements; an app picks one and hands it to
// [NewLimiter].
type Store = driver.Store

// MemoryStore is the store that keeps windows in this process, with the
// same semantics as the Redis drivers: the store of a single instance,
// and the local fallback of a [Limiter] on a shared store ([FailLocal]).
// Make one with [NewMemoryStore]; its methods are those of the [driver]
// contract, which a [Limiter] calls.
//
// A decision hashes its key once, takes one of 64 locks of its policy and
// allocates nothing. Idle keys are swept as the store is used, without a
// background goroutine: memory follows the keys active within their
// longest window, and the number of keys is bounded ([WithMaxKeys]). It
// keeps the refusals its limiters count, per minute, as the Redis drivers
// do. A MemoryStore is safe for concurrent use.
type MemoryStore = memstore.Store

// MemoryOption configures a [MemoryStore].
type MemoryOption = memstore.Option

// NewMemoryStore returns an empty [MemoryStore]. It panics on an invalid
// option, a programmer error caught at start-up.
func NewMemoryStore(opts ...MemoryOption) *MemoryStore { return memstore.New(opts...) }

// WithMaxKeys bounds the number of keys a [MemoryStore] holds; 1,048,576
// by default (a limiter's FailLocal fallback store holds at most
// 100,000). It must be at least 1.
//
// When a new key takes the store past the bound, a key of the policy
// that holds the most keys is forgotten, as if its window had passed: the
// least recently used of a sample, never one locked out (Policy.Lockout)
// before its lockout ends. So a client who floods new keys (rotating
// addresses, phone numbers or account names) costs bounded memory, and
// what it can achieve is bounded too:
//   - it cannot make another policy forget its windows while its own
//     policy holds more keys: the flooded policy pays for the flood;
//   - within the flooded policy, once the store is full, it can make keys
//     not used lately forget their windows; a key in active use is rarely
//     the least recently used of the sample;
//   - it cannot lift a lockout: locked-out keys are kept even past the
//     bound, up to twice the bound; only a store holding twice its bound
//     forgets locked-out keys too, the least recently used first.
//
// Size the bound above the keys expected within the longest window, or
// use a shared store (package redisstore), whose memory Redis bounds.
func WithMaxKeys(n int) MemoryOption { return memstore.WithMaxKeys(n) }

// RuleState is the state of one rule after a decision ([Decision.Rules]):
// its limit and window, the units used, and when the request fits
// (RetryAfter), the window empties (ResetAfter) and its oldest units
// leave it (NextAfter). Stores report it as they decide, so it is the
// driver's type.
type RuleState = driver.RuleState

// ErrMisconfigured is wrapped by the error [Limiter.Check] returns when the
// store is configured so that no decision can succeed until someone
// changes its configuration: for Redis a wrong password or ACL user, a
// database index the server does not have, an ACL that forbids every way
// the store runs its decisions, a server that runs no Lua, or a key the
// store keeps holding a value of another type. Such a store is not down
// and will not come back by itself: report it and stop, rather than wait
// for it as for a store that does not answer yet.
var ErrMisconfigured = driver.ErrMisconfigured

// RefusedKey is a key a limiter refused, with how many of its requests it
// refused ([Limiter.TopRefused]).
type RefusedKey struct {
	// Key is the key as the limiter hands it to its store: unchanged
	// when it is at most 128 bytes, else a hash of it; without a
	// shard's suffix under Policy.Shards.
	Key string
	// Refusals is the number of the key's requests refused.
	Refusals int64
}
