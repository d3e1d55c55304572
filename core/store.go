package core

import (
	"context"
	"time"
)

// Store keeps the sliding windows of every (policy, key) pair. [RedisStore]
// shares them between app instances; [MemoryStore] keeps them in one
// process. Users may bring their own Store: it must decide each Take
// atomically, so that concurrent calls never admit more than a rule allows,
// and keep calendar rules ([Rule].Calendar) and lockouts ([Query].Lockout)
// as these two do.
//
// Every method takes a context that carries the [Limiter]'s timeout. Its
// Done closes when the limiter stops waiting for the answer: at the
// timeout while the process is responsive, and later only while the
// process itself is starved of CPU, when the answer may have come with no
// goroutine free to read it (up to a second later; its Deadline is that
// latest time). A store waits for its answer until Done closes and takes
// an answer that is there by then, bounds its I/O by Deadline rather
// than by the timeout, and does not use the context after the method
// returns.
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
	// q.Key at store time at (its Result.At), or as many as are left.
	Refund(ctx context.Context, q Query, at int64) error
	// Reset forgets everything recorded for q.Policy and q.Key, its
	// lockout included.
	Reset(ctx context.Context, q Query) error
}

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
	// holds the decision's time in the rule's Location.
	Rules []Rule
	// Algorithm is the policy's algorithm.
	Algorithm Algorithm
	// Buckets is the number of buckets per window under SlidingBuckets
	// (never 0 in a Query built by a Limiter).
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
	Rules []RuleState
	// LockedFor is, when the key is locked out (Query.Lockout), the time
	// until its lockout ends: one that began earlier, or the one this
	// Take's denial started. It is 0 when the key is not locked out.
	LockedFor time.Duration
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
}

// bucketWidth returns the width in microseconds of rule r's buckets.
func (q *Query) bucketWidth(r Rule) int64 {
	return max(1, r.Window.Microseconds()/int64(q.Buckets))
}

// Remaining returns the units left in the rule's window.
func (s RuleState) Remaining() int64 { return max(0, s.Limit-s.Used) }

// Fleet is an optional capability of a [Store] shared by several app
// instances, such as [RedisStore]: it counts the instances that use each
// policy, so that under [FailLocal] each instance admits only its share
// of a limit while the store fails (see [WithLocalShare]). A [Limiter]
// finds it by a type assertion when it is built; on a store without it,
// every instance counts itself alone.
type Fleet interface {
	// Join announces this process as an instance that uses policy, for as
	// long as the store is used, and returns a function that reports how
	// many instances have announced the policy lately, as the store last
	// said: at least 1, and 1 until the store has answered. The function
	// must not block: a limiter calls it when the store fails. Joining a
	// policy twice counts once.
	Join(policy string) (instances func() int)
}
