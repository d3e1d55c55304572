package driver

import (
	"context"
	"errors"
	"time"
)

// Store keeps the windows of every (policy, key) pair. It is the whole
// contract between a limiter and where its counts live; a store may also
// offer the optional capabilities of this package, each an interface of
// its own, which a limiter looks for once, when it is built.
//
// A store decides each Take atomically, so that concurrent calls never
// admit more than a rule allows, and keeps calendar rules
// ([Rule].Calendar) and lockouts ([Query].Lockout); when it implements
// [Challenges], challenges ([Rule].Challenge) too. The suite of package
// drivertest checks all of it.
//
// Every method takes a context that carries the limiter's timeout. Its
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

// ErrMisconfigured is wrapped by the error a store's Check ([Checker])
// returns when the store is configured so that no decision can succeed
// until someone changes its configuration: for Redis a wrong password or
// ACL user, a database index the server does not have, an ACL that
// forbids every way the store runs its decisions, a server that runs no
// Lua, or a key the store keeps holding a value of another type. Such a
// store is not down and will not come back by itself.
var ErrMisconfigured = errors.New("store misconfigured")

// ErrClosed is wrapped by a store's error when the store's client was
// closed: no call of it will succeed again, and a limiter stops retrying
// in the background what it keeps for the store.
var ErrClosed = errors.New("store closed")

// ErrInvalidQuery is wrapped by a store's error for a query no limiter
// builds (an unknown algorithm or calendar period, too many rules): a
// store called directly, not through a limiter.
var ErrInvalidQuery = errors.New("invalid query")

// Query is one call to a [Store].
type Query struct {
	// Policy is the policy name, the key namespace.
	Policy string
	// Key is the key within the policy, already bounded ([BoundKey]);
	// shard i of a policy with shards appends "#<i>".
	Key string
	// Rules are the policy's rules; all must have room. A calendar rule
	// counts the units admitted in its current period, the period that
	// holds the decision's time in the rule's Location ([Rule.Period]).
	// A rule's Challenge is honoured by a store that implements
	// [Challenges] (a limiter sends no rule with one to any other).
	Rules []Rule
	// Algorithm is the policy's algorithm.
	Algorithm Algorithm
	// Buckets is the number of buckets per window under SlidingBuckets
	// (never 0 in a Query built by a limiter): see [Query.BucketWidth].
	Buckets int
	// N is the number of units asked for (for Peek: the units the
	// RetryAfter is computed for).
	N int64
	// Keep is the most units the store needs to remember per key under
	// SlidingLog: the largest limit of the policy's sliding rules in any
	// tier, so that a key moved to another tier keeps its usage. A store
	// may keep more; a Query built by a limiter never has it below the
	// limits of its sliding Rules.
	Keep int64
	// Now is the time of the decision in microseconds since the Unix
	// epoch, set when the limiter has a clock of its own; 0 means the
	// store's own clock decides.
	Now int64
	// Lockout is the policy's [Lockout]. When its For is set, a Take
	// denied by a rule locks the key out: until the lockout ends, every
	// Take and Peek of the key is denied, records nothing and reports
	// the time left in Result.LockedFor.
	Lockout Lockout
}

// BucketWidth returns the width in microseconds of the buckets of rule r
// under SlidingBuckets: its Window divided by q.Buckets, in whole
// microseconds rounded down, at least one microsecond.
func (q *Query) BucketWidth(r Rule) int64 {
	return max(1, r.Window.Microseconds()/int64(max(1, q.Buckets)))
}

// Result is a store's answer to a Take or Peek.
type Result struct {
	// Allowed reports whether the units were admitted (Take) or would fit
	// now (Peek).
	Allowed bool
	// Challenged reports that every rule has room for the units but
	// that they would bring a rule's count to its Challenge while the key
	// has no pass ([Challenges]): nothing was recorded and Allowed is
	// false. A key locked out, or a rule without room, is denied rather
	// than challenged.
	Challenged bool
	// At is the store's clock at the decision, in microseconds since the
	// Unix epoch. It identifies the recorded units for a Refund.
	At int64
	// LockedFor is, when the key is locked out (Query.Lockout), the time
	// until its lockout ends: one that began earlier, or the one this
	// Take's denial started. It is 0 when the key is not locked out.
	LockedFor time.Duration
	// Rules holds one state per rule of the query, in order.
	Rules RuleStates
	// Extra is the units a grant of the key added to every rule's limit
	// ([Grants]), and Exempt reports that a grant exempts the key.
	Extra  int64
	Exempt bool
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

// Prepare sizes s for n states and returns them, in its memory, for a
// store that writes its answer in place (the first four without an
// allocation): the caller sets every one.
func (s *RuleStates) Prepare(n int) []RuleState {
	s.n = n
	if n > inlineRules {
		s.more = make([]RuleState, n)
		return s.more
	}
	s.more = nil
	return s.a[:n]
}
