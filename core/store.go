package core

import (
	"context"
	"errors"
	"time"
)

// Store keeps the windows of every (policy, key) pair. It is the whole
// contract between a [Limiter] and where its counts live: [MemoryStore]
// keeps them in this process, and a driver beside this package
// (redisstore on go-redis, rueidisstore on rueidis) shares them between
// app instances through Redis. A store may also offer the optional
// capabilities below, each an interface of its own, which a Limiter looks
// for once, when it is built: [Local], [Leases], [Challenges],
// [Invalidator], [Fleet], [Partitioned], [Checker] and [Refusals].
//
// A store decides each Take atomically, so that concurrent calls never
// admit more than a rule allows, and keeps calendar rules
// ([Rule].Calendar) and lockouts ([Query].Lockout) as MemoryStore does,
// and, when it implements [Challenges], challenges ([Rule].Challenge);
// the suite in internal/storetest checks all of it, and every store of
// this module passes it.
//
// Every method takes a context that carries the Limiter's timeout. Its
// Done closes when the limiter stops waiting for the answer: at the
// timeout while the process is responsive, and later only while the
// process itself is starved of CPU, when the answer may have come with no
// goroutine free to read it (up to a second later; its Deadline is that
// latest time). A store waits for its answer until Done closes and takes
// an answer that is there by then, bounds its I/O by Deadline rather
// than by the timeout, and does not use the context after the method
// returns.
//
// An error that concerns one key only, such as a key holding a value of
// another type, wraps [ErrKeyFailure]: it says nothing of the store's
// health. Any other error counts as a failure of the store.
type Store interface {
	// Take admits q.N units for q.Key when every rule has room for them
	// and records them at the decision's time (Result.At); otherwise it
	// records nothing. The limiter never sends a Take twice: a store that
	// retries its own calls must make sure a retried Take does not record
	// again.
	Take(ctx context.Context, q Query) (Result, error)
	// Peek reports what a Take of q.N units would see, recording nothing.
	Peek(ctx context.Context, q Query) (Result, error)
	// Refund removes q.N of the units a successful Take recorded for
	// q.Key at store time at (its Result.At), or as many as are left;
	// nothing when the key was reset after at.
	Refund(ctx context.Context, q Query, at int64) error
	// Reset forgets everything recorded for q.Policy and q.Key: its
	// windows, calendar counts, lockout, pass ([Challenges]) and leases.
	Reset(ctx context.Context, q Query) error
}

// ErrKeyFailure is wrapped by a store's error that concerns one key only
// (a key holding a value of another type): the failure policy decides for
// that request, but the failure does not count toward the circuit breaker.
var ErrKeyFailure = errors.New("failure of one key")

// Query is one call to a [Store].
type Query struct {
	// Policy is the policy name, the key namespace.
	Policy string
	// Key is the key within the policy, already bounded in length (keys
	// over 128 bytes are replaced by a hash of themselves; shard i of a
	// policy with Shards appends "#<i>").
	Key string
	// Rules are the policy's rules; all must have room. A calendar rule
	// counts the units admitted in its current period, the period that
	// holds the decision's time in the rule's Location ([Rule.Period]).
	// A rule's Challenge is honoured by a store that implements
	// [Challenges] (a Limiter sends no rule with one to any other).
	Rules []Rule
	// Algorithm is the policy's algorithm.
	Algorithm Algorithm
	// Buckets is the number of buckets per window under SlidingBuckets
	// (never 0 in a Query built by a Limiter): the buckets of a rule are
	// Window/Buckets wide, in whole microseconds rounded down, at least
	// one microsecond.
	Buckets int
	// N is the number of units asked for (for Peek: the units the
	// RetryAfter is computed for).
	N int64
	// Keep is the most units the store needs to remember per key under
	// SlidingLog: the largest limit of the policy's sliding rules in any
	// tier, so that a key moved to another tier keeps its usage. A store
	// may keep more; a Query built by a Limiter never has it below the
	// limits of its sliding Rules.
	Keep int64
	// Now is the time of the decision in microseconds since the Unix
	// epoch, set when the limiter has a clock of its own ([WithClock]);
	// 0 means the store's own clock decides.
	Now int64
	// Lockout is the policy's [Lockout]. When its For is set, a Take
	// denied by a rule locks the key out: until the lockout ends, every
	// Take and Peek of the key is denied, records nothing and reports
	// the time left in Result.LockedFor.
	Lockout Lockout
}

// Result is a store's answer to a Take or Peek.
type Result struct {
	// Allowed reports whether the units were admitted (Take) or would fit
	// now (Peek).
	Allowed bool
	// At is the store's clock at the decision, in microseconds since the
	// Unix epoch. It identifies the recorded units for a Refund.
	At int64
	// Rules holds one state per rule of the query, in order.
	Rules RuleStates
	// LockedFor is, when the key is locked out (Query.Lockout), the time
	// until its lockout ends: one that began earlier, or the one this
	// Take's denial started. It is 0 when the key is not locked out.
	LockedFor time.Duration
	// Challenged reports that every rule has room for the units but
	// that they would bring a rule's count to its Challenge while the key
	// has no pass ([Challenges]): nothing was recorded and Allowed is
	// false. A key locked out, or a rule without room, is denied rather
	// than challenged.
	Challenged bool
}

// RuleState is the state of one rule after a decision.
type RuleState struct {
	// Limit is the rule's limit.
	Limit int64
	// Window is the rule's window; for a calendar rule, the length of
	// its current period (23 to 25 hours for a day across a clock change,
	// 29 days for February 2024).
	Window time.Duration
	// Calendar is the rule's calendar period; 0 for a sliding rule.
	Calendar Calendar
	// Used is the number of units in the window (or the current period)
	// after the decision.
	Used int64
	// RetryAfter is zero when the request fits the rule; otherwise it is
	// when enough old units leave the window for it to fit, or when the
	// current period ends.
	RetryAfter time.Duration
	// ResetAfter is when the window is empty again; for a calendar rule,
	// when its current period ends and its count starts anew, used or
	// not.
	ResetAfter time.Duration
	// NextAfter is when the oldest units in the window leave it, so that
	// the window has more room than now; zero when it holds none. For a
	// calendar rule, it is ResetAfter. It is never after ResetAfter.
	NextAfter time.Duration
}

// Remaining returns the units left in the rule's window.
func (s RuleState) Remaining() int64 { return max(0, s.Limit-s.Used) }

// inlineRules is how many rule states RuleStates holds without an
// allocation; policies with more rules keep the rest on the heap.
const inlineRules = 4

// RuleStates holds the state of each rule of a query, in order: the
// first four without an allocation, so that a store's answer crosses the
// [Store] interface by value at no cost. The zero value is empty.
type RuleStates struct {
	n    int
	a    [inlineRules]RuleState
	more []RuleState // all of them, when n > inlineRules
}

// Append adds the state of the next rule.
func (s *RuleStates) Append(st RuleState) {
	switch {
	case s.n < inlineRules:
		s.a[s.n] = st
	case s.n == inlineRules:
		s.more = append(append(make([]RuleState, 0, 2*inlineRules), s.a[:]...), st)
	default:
		s.more = append(s.more, st)
	}
	s.n++
}

// All returns the states in order. The slice shares the memory of s:
// copy it to keep it past s.
func (s *RuleStates) All() []RuleState {
	if s.n > inlineRules {
		return s.more[:s.n]
	}
	return s.a[:s.n]
}

// Local is implemented by a store that keeps its windows in this process,
// as [MemoryStore] does: its calls neither block nor fail for want of a
// server, and no other instance shares what it holds. A [Limiter] on a
// Local store decides without a timeout, circuit breaker, deny cache or
// failure policy of its own, all of which would only cost time. A store
// without it is taken to be shared and fallible.
type Local interface {
	Store
	// Local marks the store as in-process; it does nothing.
	Local()
}

// Leases is implemented by a store that keeps the leases of concurrency
// limits (Policy.InFlight): [MemoryStore], and the Redis drivers. A
// [Limiter] of an InFlight policy needs it, and NewLimiter refuses a
// store without it, naming both.
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
	// the limiter has a clock of its own ([WithClock]); 0 means the
	// store's own clock.
	Now int64
}

// Challenges is implemented by a store that keeps challenges
// ([Rule].Challenge): [MemoryStore] and the Redis drivers. A [Limiter]
// whose policy has a Challenge needs it, and NewLimiter refuses a store
// without it, naming both.
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
// stale: a key reset or refunded, whose denials no longer hold, and a
// key whose tier changed ([Limiter.InvalidateTier]). A [Limiter] with a
// deny cache or cached tiers on a shared store without it keeps neither:
// a cache no reset could reach would deny past a reset.
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
	// Tier reports that the key's tier changed; otherwise the key was
	// reset or refunded, so its cached denials and lockout may not hold.
	Tier bool
	// Resync reports that invalidations may have been missed.
	Resync bool
}

// Fleet is implemented by a store shared by several app instances that
// counts the instances using each policy, so that under [FailLocal] each
// instance admits only its share of a limit while the store fails (see
// [WithLocalShare]). On a store without it, every instance counts itself
// alone.
type Fleet interface {
	// Join announces this process as an instance that uses policy, for as
	// long as the store is used, and returns a function that reports how
	// many instances have announced the policy lately, as the store last
	// said: at least 1, and 1 until the store has answered. The function
	// must not block: a limiter calls it when the store fails. Joining a
	// policy twice counts once.
	Join(policy string) (instances func() int)
}

// Partitioned is implemented by a store spread over several servers, such
// as a Redis Cluster: a [Limiter] keeps a circuit breaker per partition,
// so that one failing server switches only its own keys to the failure
// policy.
type Partitioned interface {
	// Partition names the partition that holds the data of policy's
	// (bounded) key now: the same name for every key on one server,
	// distinct names for distinct servers. It must be fast and must not
	// block.
	Partition(policy, key string) string
}

// Checker is implemented by a store that can tell whether it is
// configured so that limits hold ([Limiter.Check]).
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
// that shares the store, for [Limiter.TopRefused]: [MemoryStore] and the
// Redis drivers. A limiter counts its refusals in memory, in a sketch of
// fixed size, and adds them to the store every few seconds while it
// refuses requests, from a goroutine of its own (never on the request
// path), and once more when TopRefused is called. On a store without
// it, TopRefused reports the refusals of the one limiter it is called on.
//
// A store counts the refusals of each policy per minute of its own clock
// (the Redis server's), keeps the 1,000 keys with the highest counts of
// each minute, and forgets a minute once TopRefused no longer reads it,
// so that it holds at most 6,000 keys per policy however many keys are
// refused. Keys are bounded ([BoundKey]); a store keeps them as they
// are. Each method's context bounds the call.
type Refusals interface {
	// AddRefused adds refused[i].Refusals to the count of refused[i].Key
	// under policy in the current minute, for every i, and keeps the
	// 1,000 highest counts of the minute.
	AddRefused(ctx context.Context, policy string, refused []RefusedKey) error
	// TopRefused returns at most n keys of policy with the highest
	// counts summed over the current minute and the five before it,
	// highest first and ties in key order; nothing for n < 1.
	TopRefused(ctx context.Context, policy string, n int) ([]RefusedKey, error)
}

// bucketWidth returns the width in microseconds of rule r's buckets.
func (q *Query) bucketWidth(r Rule) int64 {
	return max(1, r.Window.Microseconds()/int64(q.Buckets))
}

// RefusedKey is a key a limiter refused, with how many of its requests it
// refused.
type RefusedKey struct {
	// Key is the key as the limiter hands it to its store (bounded: see
	// [BoundKey]), without a shard's suffix under Policy.Shards.
	Key string
	// Refusals is the number of the key's requests refused.
	Refusals int64
}
