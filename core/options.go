package core

import (
	"context"
	"fmt"
	"time"
)

// defaultTimeout bounds every store call unless [WithTimeout] sets another.
const defaultTimeout = 20 * time.Millisecond

// FailurePolicy says how a [Limiter] decides when its store fails or times
// out.
type FailurePolicy uint8

const (
	// FailLocal decides with an in-process [MemoryStore] for the same
	// policy, so the service stays up and each instance stays protected.
	// It is the default.
	FailLocal FailurePolicy = iota
	// FailOpen admits every request while the store fails.
	FailOpen
	// FailClosed denies every request while the store fails; adapters
	// answer 503 Service Unavailable, not 429.
	FailClosed
)

// String returns the policy's name.
func (p FailurePolicy) String() string {
	switch p {
	case FailLocal:
		return "FailLocal"
	case FailOpen:
		return "FailOpen"
	case FailClosed:
		return "FailClosed"
	}
	return fmt.Sprintf("FailurePolicy(%d)", int(p))
}

// Option configures a [Limiter].
type Option func(*options)

type options struct {
	timeout       time.Duration
	failure       FailurePolicy
	observer      Observer
	denyCacheSize int
	breakerFails  int
	breakerCool   time.Duration
	tierFunc      func(ctx context.Context, key string) (string, error)
	tiers         map[string][]Rule
	tierCacheSize int
	tierCacheTTL  time.Duration
	clock         func() time.Time
	keep          int64 // the largest limit of every tier (set by the tiers' parent)
	wholeLimit    bool  // WithLocalShare(false)
	tier          bool  // a tier's limiter: its parent counts its refusals
	refusedEvery  time.Duration
	noRefusals    bool // count no refusals (tests, benchmarks)
}

// WithTimeout bounds every store call; 20 ms by default.
// It must be positive. The bound holds whatever the go-redis client's own
// options are.
//
// The timeout means that the store did not answer, not that this process
// was too busy to read an answer that came: when the timeout falls due
// while the process is starved of CPU (the timeout noticed late by an
// eighth of the timeout or more, or the Go scheduler busy: every P
// running with goroutines waiting, or slow by that much to run a
// goroutine that yields, now or for any call in the last 100 ms), the
// call waits on, twice as long as the process was held up, and is judged
// anew, up to a second past the timeout. A login server whose CPU an attack of
// password guesses saturates thus stays exact on a healthy Redis, while
// a Redis that is paused, stopped or cut off costs a responsive process
// no more than the timeout.
func WithTimeout(d time.Duration) Option {
	return func(o *options) { o.timeout = d }
}

// WithFailurePolicy says how to decide when the store fails or times out;
// [FailLocal] by default.
func WithFailurePolicy(p FailurePolicy) Option {
	return func(o *options) { o.failure = p }
}

// WithObserver adds an observer of the limiter: every decision, store
// failure, breaker change and failed [Limiter.Check]. Several observers
// are called in order. What only a middleware knows (skipped requests,
// bad keys, denials let through in dry-run mode) goes to the middleware's
// own observer instead, so one observer given to both sees every event
// once.
func WithObserver(obs Observer) Option {
	return func(o *options) { o.observer = join(o.observer, obs) }
}

// WithDenyCache sets how many denied keys the limiter remembers locally;
// 10,000 by default, 0 turns the cache off. When it is full, expired
// denials, or else those that answered the fewest requests (then those
// that end soonest), make room: a flood of keys denied once each does not
// push out the keys that flood the limiter most.
// A key denied with RetryAfter r cannot be admitted before r passes, so
// until then a flood from it is answered without a store call. The cache
// never admits: it only answers denials that the store would give as
// well. A limiter on a [MemoryStore] has no deny cache: the store answers
// as fast. Nor has a limiter of an InFlight policy: its units free
// whenever a request ends.
func WithDenyCache(size int) Option {
	return func(o *options) { o.denyCacheSize = size }
}

// WithBreaker sets the circuit breaker: after failures consecutive store
// failures, the limiter stops calling the store for cooldown and decides
// by its failure policy at once; then one probe call at a time tests the
// store. The default is 5 failures and 1 s; failures 0 turns it off. The
// failure of one key (a key holding a value of another type) does not
// count. On a store spread over servers ([driver.Partitioned]) each partition
// has a breaker of its own: on a Redis Cluster, with either Redis driver,
// each master (by the slot of the key's hash tag, as Redis places it), so
// that one failing master switches only its own keys to the failure
// policy.
func WithBreaker(failures int, cooldown time.Duration) Option {
	return func(o *options) {
		o.breakerFails = failures
		o.breakerCool = cooldown
	}
}

// WithClock makes the limiter read the time of its decisions from clock
// instead of the store's own clock (the Redis server's TIME, or the
// process's monotonic clock for a [MemoryStore]). Tests use it to step
// time exactly. With a Redis store every app instance then writes its own
// clock's times, so the windows are only as exact as the instances'
// clocks agree: leave it unset in production. Keys still expire by the
// Redis server's clock: each write extends a key's TTL by how far clock
// runs behind the server's, so no entry expires while it counts in
// clock's time (a clock ahead of the server's only keeps keys longer).
func WithClock(clock func() time.Time) Option {
	return func(o *options) { o.clock = clock }
}

// newOptions returns the options opts set, over the defaults, checked.
func newOptions(policy string, opts []Option) (options, error) {
	o := options{
		timeout:       defaultTimeout,
		denyCacheSize: 10000,
		breakerFails:  5,
		breakerCool:   time.Second,
		tierCacheSize: 10000,
		tierCacheTTL:  time.Minute,
		refusedEvery:  refusedEvery,
	}
	for _, opt := range opts {
		opt(&o)
	}
	switch {
	case o.timeout <= 0:
		return o, fmt.Errorf("ratekit: policy %q: WithTimeout %v must be positive: %w", policy, o.timeout, ErrInvalidPolicy)
	case o.failure > FailClosed:
		return o, fmt.Errorf("ratekit: policy %q: WithFailurePolicy: unknown %v: %w", policy, o.failure, ErrInvalidPolicy)
	case o.denyCacheSize < 0:
		return o, fmt.Errorf("ratekit: policy %q: WithDenyCache size %d must not be negative: %w", policy, o.denyCacheSize, ErrInvalidPolicy)
	case o.breakerFails < 0:
		return o, fmt.Errorf("ratekit: policy %q: WithBreaker failures %d must not be negative: %w", policy, o.breakerFails, ErrInvalidPolicy)
	case o.refusedEvery <= 0:
		return o, fmt.Errorf("ratekit: policy %q: refusals flushed every %v: must be positive: %w", policy, o.refusedEvery, ErrInvalidPolicy)
	case o.breakerFails > 0 && o.breakerCool <= 0:
		return o, fmt.Errorf("ratekit: policy %q: WithBreaker cooldown %v must be positive: %w", policy, o.breakerCool, ErrInvalidPolicy)
	}
	return o, nil
}

// WithLocalShare says what each instance admits on its own under
// [FailLocal] while a shared store fails: true (the default) gives each
// instance its share of every limit, ⌊Limit / N⌋ and at least 1, where N
// is the number of instances that use the policy, as the store last
// counted them ([driver.Fleet]: the Redis drivers count them; until it has, and on a
// store that does not, N is 1). During an outage that starts from empty
// windows the fleet then admits at most N × max(1, ⌊Limit/N⌋) units per
// window: the limit, or N when the limit is below N. false gives every
// instance the whole limit, so that N instances admit up to N × Limit.
// Either way each instance's local window starts with the admissions it
// made through the store in the current windows, and the lockouts it
// learned of hold.
func WithLocalShare(share bool) Option {
	return func(o *options) { o.wholeLimit = !share }
}

// WithTiers chooses the rules per key: resolve names a key's tier, for
// example the plan of an API key ("free", "pro") looked up in the app's
// database, getting the key as the limiter got it, however long; and
// tiers maps each tier to its rules, which must have the windows (and
// calendar periods) of the policy's own Rules, with limits of their own
// (free: 100 a minute and 1,000 a day; pro: 1,000 a minute and 100,000 a
// day). The policy's own Rules apply to keys whose tier is unknown or
// cannot be resolved. All tiers share the policy's name, so a key's usage
// carries over when its tier changes: a key moved to a higher tier gets
// the higher limit on its next request after [Limiter.InvalidateTier] (or
// after the cache entry expires), on every instance when the store is a
// shared [driver.Invalidator] store (Redis), and no cached denial of the old tier survives the move.
//
// A tier's calendar rule may have a Location of its own, so that a
// customer's tier carries the customer's time zone ("pro/Europe/Paris"):
// a key's period count carries over between tiers of one Location, and
// a key moved to another Location counts its new period from what that
// period already holds (nothing, unless it was used before). The
// policy's Lockout holds in every tier: a key locked out stays so when
// its tier changes.
//
// Resolved tiers are cached (see [WithTierCache]); resolve runs on the
// request path on a miss, under the request's context. A lookup that
// fails decides that request by the policy's own Rules and is not
// cached: the next request asks again.
func WithTiers(resolve func(ctx context.Context, key string) (tier string, err error), tiers map[string][]Rule) Option {
	return func(o *options) {
		o.tierFunc = resolve
		o.tiers = tiers
	}
}

// WithTierCache sets how many keys' tiers are cached and for how long;
// 10,000 keys for a minute by default. size 0 turns the cache off
// (resolve runs on every request).
func WithTierCache(size int, ttl time.Duration) Option {
	return func(o *options) {
		o.tierCacheSize = size
		o.tierCacheTTL = ttl
	}
}

// withoutTiers makes a tier's limiter: no tiers of its own, keeping keep
// units of history.
func withoutTiers(keep int64) Option {
	return func(o *options) {
		o.tierFunc = nil
		o.tiers = nil
		o.keep = keep
		o.tier = true
	}
}
