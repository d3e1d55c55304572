package core

import "time"

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
	// succeed; zero when allowed.
	RetryAfter time.Duration
	// ResetAfter is when the binding rule's window is empty again.
	ResetAfter time.Duration
	// Rule is the index in the policy of the binding rule: on a denial the
	// violated rule that frees up last, else the rule with the fewest
	// units remaining.
	Rule int
	// Source says who decided: the store, the deny cache or a fallback.
	Source Source
	// Rules holds the state of every rule of the policy, in order. It is
	// nil for decisions that did not see the windows (FailOpen,
	// FailClosed, the deny cache).
	Rules []RuleState

	// ticket identifies the units an allowed decision recorded, for Refund.
	ticket ticket
}

// ticket identifies recorded units.
type ticket struct {
	owner *Limiter
	key   string
	id    string
	at    int64
	n     int64
	local bool
}
