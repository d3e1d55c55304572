package driver

import (
	"context"
	"time"
)

// Local is implemented by a store that keeps its windows in this process,
// as the memory store does: its calls neither block nor fail for want of
// a server, and no other instance shares what it holds. A limiter on a
// Local store decides without a timeout, circuit breaker, deny cache or
// failure policy of its own, all of which would only cost time. A store
// without it is taken to be shared and fallible.
type Local interface {
	Store
	// Local marks the store as in-process; it does nothing.
	Local()
}

// Leases is implemented by a store that keeps the leases of concurrency
// limits (a policy's InFlight). A limiter of an InFlight policy needs it,
// and core.NewLimiter refuses a store without it, naming both.
type Leases interface {
	// TakeLease adds l to l.Key's leases under l.Policy if they then
	// hold at most l.Limit units, and reports whether it did and how
	// many units the key's live leases hold after it.
	TakeLease(ctx context.Context, l Lease) (ok bool, held int64, err error)
	// HeldLeases reports how many units l.Key's live leases hold.
	HeldLeases(ctx context.Context, l Lease) (held int64, err error)
	// ReleaseLease removes l; nothing if it is gone.
	ReleaseLease(ctx context.Context, l Lease) error
	// RenewLeases makes each lease of ls that is still there expire its
	// TTL from now, and reports in held[i] whether ls[i] was; len(held)
	// is len(ls).
	RenewLeases(ctx context.Context, ls []Lease, held []bool) error
}

// Lease is a lease of a concurrency limit: N units of Key held by one
// request in flight. It is identified by Owner, a random number of the
// limiter that took it, and Seq, the first of the N sequence numbers it
// takes, so that leases are unique across instances and a release or
// renewal touches its own lease only.
type Lease struct {
	Policy, Key string
	Owner, Seq  int64
	// N is the units the lease holds, and Limit the most the key's
	// leases may hold (the policy's InFlight).
	N, Limit int64
	// TTL is how long a shared store keeps the lease without a renewal
	// (the instance that holds it may have died). A Local store keeps
	// it until it is released: its holder and the store are one process.
	TTL time.Duration
	// Now is the time of the operation in µs since the Unix epoch when
	// the limiter has a clock of its own; 0 means the store's own clock.
	Now int64
}

// Challenges is implemented by a store that keeps challenges
// ([Rule].Challenge). A limiter whose policy has a Challenge needs it, and
// core.NewLimiter refuses a store without it, naming both.
//
// Such a store decides a challenge in the Take (or Peek) itself, in the
// same atomic step as the rules: when every rule has room for q.N units
// and the key is not locked out, but for some rule with a Challenge its
// units used plus q.N reach the Challenge, and the key holds no pass, the
// answer is Result.Challenged, nothing is recorded and no lockout starts.
// The pass lives with the key's counts: Reset forgets it, so that a reset
// reaches every instance as it does for the counts.
type Challenges interface {
	// Pass records that q.Key passed a challenge under q.Policy: until
	// the longest window of q's rules with a Challenge has passed, or
	// the current period of such a calendar rule has ended, whichever is
	// later (from the store's time, or q.Now), the key's Takes and Peeks
	// are not challenged. A pass never shortens one the key holds.
	Pass(ctx context.Context, q Query) error
}

// Invalidator is implemented by a store shared by several app instances
// that carries, from any instance to every other, what makes a cache
// stale: a key reset or refunded, whose denials no longer hold, a key
// that passed a challenge, and a key whose tier changed. A limiter with a deny cache or cached tiers on a
// shared store without it keeps neither: a cache no reset could reach
// would deny past a reset.
type Invalidator interface {
	// Watch calls f, from a goroutine of the store, for every
	// invalidation of policy's keys by any instance, this one included,
	// until the store is closed. It calls f with Resync set when
	// invalidations sent until now may have been missed (when it first
	// listens, and after every reconnection): caches must then forget
	// what they hold, and until the first Resync they hold nothing.
	Watch(policy string, f func(Invalidation))
	// Invalidate reports to every instance that the tier of policy's
	// (bounded) key changed.
	Invalidate(ctx context.Context, policy, key string) error
}

// Invalidation is what an [Invalidator] reports to its watchers.
type Invalidation struct {
	// Key is the bounded key, empty with Resync.
	Key string
	// Tier reports that the key's tier changed.
	Tier bool
	// Reset reports that the key was reset: everything it held is gone.
	// A reset is reported twice, as Reset and as the plain invalidation
	// that releases before Reset was told (v0.1.0) understand.
	Reset bool
	// Pass reports that the key passed a challenge ([Challenges]).
	Pass bool
	// Resync reports that invalidations may have been missed.
	Resync bool
}

// An Invalidation with none of Tier, Reset, Pass and Resync reports a key
// reset or refunded: its cached denials, lockout and pass may not hold.

// Fleet is implemented by a store shared by several app instances that
// keeps, per policy, an announcement of every instance that uses it: so
// that while the store fails each instance admits only its share of a
// limit, that instances using one policy name with different rules are
// told, and that the store keeps what the instance that needs the most
// needs. On a store without it, every instance counts itself alone.
type Fleet interface {
	// Join announces this process as an instance that uses m.Policy as m
	// says, for as long as the store is open, and returns a function that
	// reports how many instances have announced the policy lately, as the
	// store last said: at least 1, and 1 until the store has answered.
	// The function must not block: a limiter calls it when the store
	// fails. Joining a policy twice counts once, and announces the first
	// Member.
	Join(m Member) (instances func() int)
}

// Member is what an instance announces of a policy it uses ([Fleet]).
type Member struct {
	// Policy is the policy's name.
	Policy string
	// Config identifies the policy's configuration as this instance has
	// it (rules, algorithm, lockout, tiers): instances that announce
	// different ones limit one name differently.
	Config string
	// Keep is the most units per key this instance asks the store to
	// keep (Query.Keep) and Window its longest sliding window, in any
	// tier: a store keeps, for every instance, what the one that needs
	// the most needs, whichever instance writes.
	Keep   int64
	Window time.Duration
	// Widths are the widths of the buckets its sliding rules count in
	// under SlidingBuckets ([Query.BucketWidth]), every tier's; none
	// under SlidingLog. A store records each admission in the buckets of
	// every width a live instance counts in, so that instances whose
	// windows differ still count each other's admissions.
	Widths []time.Duration
	// Differ, when set, is called from a goroutine of the store with the
	// configurations that other live instances announce for the policy
	// and that differ from Config, sorted, whenever that set changes:
	// empty once they agree again.
	Differ func(configs []string)
}

// Recorder is implemented by a store shared by several app instances that
// can record units a limiter admitted without it, by its failure policy,
// while the store failed: so that they count there once it answers
// again, and the end of an outage hands out no fresh limit. A limiter
// records them before the store's next decision of their key, and all of
// them in the background as soon as the store answers.
type Recorder interface {
	// Record adds q.N units to q.Key's windows and calendar periods as
	// admitted ago before the decision's time (q.Now, or the store's
	// clock), in order among the units there, whatever the rules say; it
	// returns the store time it recorded them at, for a Refund. Units out
	// of every window by then count nowhere.
	Record(ctx context.Context, q Query, ago time.Duration) (at int64, err error)
}

// Replies is implemented by a store that can tell whether its server has
// sent anything since a given time: replies read since, or waiting unread.
// When a call's timeout falls due while the process is starved of CPU, a
// limiter waits on (up to a second past the timeout) for a server that
// answers, late because this process reads late or because it shares the
// starved CPU, but not for a server that sent nothing since the call
// began: a paused, frozen or unreachable server costs a call at most ten
// timeouts, however busy the process is.
type Replies interface {
	// Answered reports whether the server has sent bytes since since,
	// and whether the store could tell (known false: the limiter judges
	// by its scheduler alone). It must be fast and must not block.
	Answered(since time.Time) (answered, known bool)
}

// Partitioned is implemented by a store spread over several servers, such
// as a Redis Cluster: a limiter keeps a circuit breaker per partition, so
// that one failing server switches only its own keys to the failure
// policy.
type Partitioned interface {
	// Partition names the partition that holds the data of policy's
	// (bounded) key now: the same name for every key on one server,
	// distinct names for distinct servers. It must be fast and must not
	// block.
	Partition(policy, key string) string
}

// Checker is implemented by a store that can tell whether it is
// configured so that limits hold.
type Checker interface {
	// Check returns nil when the store can work and keeps limiter keys
	// until they expire; an error wrapping [ErrMisconfigured] when no
	// decision can succeed until its configuration changes; another
	// error for a store that does not answer yet, or one configured so
	// that limits may not hold (such as a Redis that evicts keys).
	Check(ctx context.Context) error
}

// Refusals is implemented by a store that keeps, per policy, how many
// requests of each key were refused lately, summed over every instance
// that shares the store. A limiter counts its refusals in memory, in a
// sketch of fixed size, and adds them to the store every few seconds
// while it refuses requests, from a goroutine of its own (never on the
// request path), and once more when its top refused keys are asked for.
// On a store without it, a limiter reports its own refusals alone.
//
// A store counts the refusals of each policy per minute of its own clock
// (the Redis server's), keeps the [RefusedKeep] keys with the highest
// counts of each minute, and forgets a minute once TopRefused no longer
// reads it, so that it holds at most RefusedKeep × [RefusedMinutes] keys
// per policy however many keys are refused. Keys are bounded
// ([BoundKey]); a store keeps them as they are. Each method's context
// bounds the call.
type Refusals interface {
	// AddRefused adds refused[i].Refusals to the count of refused[i].Key
	// under policy in the current minute, for every i, and keeps the
	// RefusedKeep highest counts of the minute.
	AddRefused(ctx context.Context, policy string, refused []RefusedKey) error
	// TopRefused returns at most n keys of policy with the highest
	// counts summed over the current minute and the ones before it
	// (RefusedMinutes in all), highest first and ties in key order;
	// nothing for n < 1.
	TopRefused(ctx context.Context, policy string, n int) ([]RefusedKey, error)
}

// Bounds of the refusals a [Refusals] store keeps.
const (
	// RefusedKeep is the most keys a store keeps per policy and minute.
	RefusedKeep = 1000
	// RefusedMinutes is the minutes TopRefused sums: the current one and
	// the five before it.
	RefusedMinutes = 6
)

// RefusedKey is a key a limiter refused, with how many of its requests it
// refused.
type RefusedKey struct {
	// Key is the key as the limiter hands it to its store (bounded: see
	// [BoundKey]), without a shard's suffix.
	Key string
	// Refusals is the number of the key's requests refused.
	Refusals int64
}

// LocalProfile is what a store in the app's own process offers: the
// memory store does. A limiter on it decides without timeouts, breaker or
// failure policy.
type LocalProfile interface {
	Local
	Leases
	Challenges
	Refusals
	Grants
}

// SharedProfile is what a store shared by the app's instances offers: the
// Redis drivers do. With it a limiter keeps a deny cache that resets on
// every instance reach, a fallback that admits each instance's share of a
// limit while the store fails and counts what it admitted then once the
// store answers, breakers per server, a check of the store's
// configuration, and the refusals of every instance summed.
type SharedProfile interface {
	Store
	Recorder
	Leases
	Challenges
	Invalidator
	Fleet
	Partitioned
	Checker
	Refusals
	Grants
}
