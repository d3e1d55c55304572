package core

import (
	"context"
	"time"

	"github.com/ratekit/ratekit/core/driver"
)

// Source says who made a [Decision].
type Source uint8

const (
	// SourceStore is a decision made by the limiter's store.
	SourceStore Source = iota
	// SourceCache is a denial answered from the limiter's deny cache: the
	// key was denied earlier and cannot be admitted before RetryAfter.
	SourceCache
	// SourceLocal is a fallback decision made by the in-process store
	// because the store failed (FailLocal).
	SourceLocal
	// SourceOpen is a fallback admission because the store failed (FailOpen).
	SourceOpen
	// SourceClosed is a fallback denial because the store failed (FailClosed).
	SourceClosed
)

// String returns the source's name.
func (s Source) String() string {
	switch s {
	case SourceStore:
		return "store"
	case SourceCache:
		return "cache"
	case SourceLocal:
		return "local"
	case SourceOpen:
		return "open"
	case SourceClosed:
		return "closed"
	}
	return "unknown"
}

// Fallback reports whether the decision was made because the store failed.
func (s Source) Fallback() bool { return s >= SourceLocal }

// Decision is the answer of a [Limiter].
type Decision struct {
	// Allowed reports whether the request may proceed.
	Allowed bool
	// Limit is the limit of the binding rule.
	Limit int64
	// Window is the window of the binding rule.
	Window time.Duration
	// Remaining is the units left in the binding rule after this decision.
	Remaining int64
	// RetryAfter is, on a denial, when this same request could first
	// succeed; zero when allowed. For a key locked out, that is when the
	// lockout ends (or later, if a rule stays full longer).
	RetryAfter time.Duration
	// ResetAfter is when the binding rule's window is empty again (for a
	// calendar rule, when its period ends); for a key locked out, no
	// earlier than RetryAfter.
	ResetAfter time.Duration
	// Rule is the index in the policy of the binding rule: on a denial the
	// violated rule that frees up last, else (an admission, or a denial by
	// a lockout alone) the rule with the fewest units remaining.
	Rule int
	// Source says who decided: the store, the deny cache or a fallback.
	Source Source
	// Locked reports a denial because the key is locked out
	// (Policy.Lockout): by a lockout that began earlier, or by the one
	// this very denial started. Remaining is then 0 whatever the rules
	// hold, and RetryAfter runs to the lockout's end. Observers see it
	// on the decision's Event; a Peek reports it too.
	Locked bool
	// Challenged reports a request that every rule had room for, but
	// whose units would bring a rule's count to its Challenge
	// ([Rule].Challenge) while the key has not passed a challenge
	// ([Limiter.Pass]). Allowed is false and nothing was recorded: the
	// request counts toward no limit. RetryAfter is 0 (a pass lets the
	// key go on at once), and Rule, Limit, Remaining and ResetAfter show
	// the rules as an admission would: the rule with the fewest units
	// remaining, before this request. A lockout or a full rule denies
	// rather than challenges.
	Challenged bool
	// Listed reports a decision made by the policy's Allow or Deny list
	// (Policy.Allow, Policy.Deny) without the store: nothing recorded.
	Listed bool
	// Grant is, on a [Limiter.Peek], the key's live grant
	// ([Limiter.Grant]); nil when it holds none. A decision of a key with
	// a grant shows its limits with the grant's Extra added; an exempt
	// key's shows them unused.
	Grant *Grant

	res    driver.Result // the store's answer: rule states, lockout, challenge
	ticket ticket        // what Refund gives back
}

// Rules returns the state of every rule of the policy (of the key's tier
// under [WithTiers]), in order. It is empty for decisions that did not see
// the windows (FailOpen, FailClosed). The slice shares the decision's
// memory: copy it to keep it past the decision.
func (d *Decision) Rules() []RuleState { return d.res.Rules.All() }

// Refund gives back the units the decision recorded, as if the request had
// not been made: "count only failures" reserves a unit before the handler
// and refunds it when the request turns out not to count. It does nothing
// for a denial, for a fallback admission that recorded nothing, and for a
// decision already refunded or whose key was reset since, under every
// algorithm and calendar rule: the key's windows are then new, and the
// refund must not add room to them. (Under WithClock, "since" is read on
// the instances' clocks, which must then agree.) The error wraps the
// store's; the units then stay counted, which can only under-admit.
//
// Under an InFlight policy the units are a lease held while the request
// runs, and Refund releases it: call it when the request ends, whatever
// its outcome (the guard's adapters do, after the handler). Releasing is
// exact: a lease is released once, however often Refund is called on the
// decision or its copies. A release that fails is retried in the
// background until it succeeds or the lease expires (Policy.LeaseTTL).
func (d *Decision) Refund(ctx context.Context) error {
	t := d.ticket
	if !d.Allowed || t.owner == nil {
		return nil
	}
	d.ticket = ticket{}
	return t.owner.refund(ctx, t)
}

// ticket identifies the units an admission recorded, for Refund.
type ticket struct {
	owner decider // the limiter's, which gives them back
	key   string  // the store key (a shard's, with shards)
	shard int     // the shard, with shards
	at    int64
	n     int64
	local bool // recorded by the local fallback store
	// mirror is the local time at which the local fallback store
	// recorded the units the store admitted (FailLocal); 0: none.
	mirror int64
	// pend is a fallback admission waiting to be recorded in the store
	// (see replays); nil: none.
	pend *pending
}

// decider is how a Limiter decides, chosen when it is built: rates on a
// Local store, rates on a shared store, or leases (Policy.InFlight). Keys
// are bounded; shard is the key's shard, with shards.
type decider interface {
	allow(ctx context.Context, key string, shard int, n int64) (Decision, error)
	peek(ctx context.Context, key string, shard int) (Decision, error)
	refund(ctx context.Context, t ticket) error
	reset(ctx context.Context, key string, shard int) error
	// probe asks the store about q's key, taking nothing: whether it
	// answers (see Limiter.watch).
	probe(ctx context.Context, q *driver.Query) error
}
