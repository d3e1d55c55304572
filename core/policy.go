package core

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrInvalidPolicy is wrapped by the error [NewLimiter] returns for a policy
// or option that cannot work. The message names the field at fault.
var ErrInvalidPolicy = errors.New("invalid policy")

// ErrInvalidCost is wrapped by the error [Limiter.AllowN] returns when n is
// below 1 or above the limit of a rule, so that no request could ever fit.
var ErrInvalidCost = errors.New("invalid cost")

// minWindow is the shortest window a Rule may have.
const minWindow = time.Millisecond

// Rule says: at most Limit units in any sliding Window.
type Rule struct {
	// Limit is the number of units admitted per Window; at least 1.
	Limit int64
	// Window is the length of the sliding window: at least 1 ms, in
	// whole microseconds.
	Window time.Duration
}

// Algorithm selects how a store keeps a window.
type Algorithm int

const (
	// SlidingLog keeps one entry per admitted unit: exact, with memory that
	// grows with Limit, 8 bytes a unit in Redis. It takes limits up to
	// 100,000 per rule; it is the default.
	SlidingLog Algorithm = iota
	// SlidingBuckets splits each window into buckets and counts the oldest
	// partial bucket in full: it never admits more than the limit and
	// under-admits by at most one bucket, with memory bounded per key
	// whatever the limit. It suits large quotas (100,000 a day).
	//
	// A unit counts until its whole bucket has left the window, so waits
	// are up to one bucket longer than under [SlidingLog]. With buckets
	// of width g = Window/Buckets (in whole microseconds, rounded down),
	// a unit admitted at time a in the bucket starting at b (b <= a < b+g)
	// counts until b + g + Window, which is between Window and Window+g
	// after a. RetryAfter and ResetAfter are therefore at most Window + g:
	// with the default 60 buckets, 61 s for a 60 s window (Retry-After:
	// 61) and 87,840 s for a day. RetryAfter is still exact for the
	// algorithm: the same request is denied 1 µs before it and fits at it.
	SlidingBuckets
)

// String returns the algorithm's name.
func (a Algorithm) String() string {
	switch a {
	case SlidingLog:
		return "SlidingLog"
	case SlidingBuckets:
		return "SlidingBuckets"
	}
	return fmt.Sprintf("Algorithm(%d)", int(a))
}

// Policy is a named set of rules that must all hold for a request to be
// admitted. Name is the key namespace and the metrics label.
type Policy struct {
	// Name identifies the policy in keys, headers and metrics. It must be
	// 1 to 64 bytes of visible ASCII (no spaces or control characters)
	// other than '{', '}', '"' and '\', so that it can go as it is into
	// Redis Cluster key names, HTTP header fields and JSON.
	Name string
	// Rules must all have room for a request; at least one and at most
	// 16, each with a window of its own.
	Rules []Rule
	// Algorithm is how the store keeps the windows; SlidingLog by default.
	Algorithm Algorithm
	// Buckets is the number of buckets each window is split into under
	// SlidingBuckets; 60 when 0. More buckets cost memory and time per
	// decision, under-admit less and shorten the longest wait, which is
	// Window + Window/Buckets (see [SlidingBuckets]). Ignored by
	// SlidingLog.
	Buckets int
	// Shards splits every key over this many store keys, each holding its
	// share of every rule's limit, so that one very hot key (a global cap)
	// spreads over several Redis Cluster slots; 0 or 1 (the default)
	// means one key. It never admits more than a rule's Limit, but it can
	// deny a request while other shards still have room: see "Hot keys"
	// in the package documentation. Each rule's Limit must be at least
	// Shards; at most [MaxShards].
	Shards int
	// InFlight, when set, makes the policy a concurrency limit instead of
	// a rate limit: at most InFlight units (requests, at cost 1) of a key
	// in flight at once, however many instances decide; at most 100,000.
	// An admission holds a lease on its units until its Decision is
	// refunded, which the guard does when the request ends (see
	// [Decision.Refund]). A denial's RetryAfter is a fixed hint of one
	// second: a unit frees when a request ends, which no store can
	// foresee. An InFlight policy has no Rules, Algorithm, Buckets or
	// Shards: to limit a route's rate as well, decide a second limiter
	// with it (guard.WithAlso, [AllowAll]).
	InFlight int64
	// LeaseTTL is how long a lease of an InFlight policy outlives the
	// last renewal by the instance that holds it, so that the leases of
	// an instance that died mid-request come back after at most LeaseTTL;
	// 30 s when 0. The limiter renews the leases it holds every third of
	// LeaseTTL, so a request may run for any time. At least 1 s, in whole
	// milliseconds. A MemoryStore's leases need no renewal and never
	// expire: their holder and the store are one process.
	LeaseTTL time.Duration
}

// maxLogLimit is the largest Limit of a SlidingLog rule.
const maxLogLimit = 100_000

// defaultBuckets is the number of buckets per window under SlidingBuckets
// unless Policy.Buckets sets another.
const defaultBuckets = 60

// MaxBuckets is the largest Policy.Buckets.
const MaxBuckets = 1000

// buckets returns the effective bucket count.
func (p *Policy) buckets() int {
	if p.Buckets == 0 {
		return defaultBuckets
	}
	return p.Buckets
}

// maxLimit returns the largest limit of the policy.
func (p *Policy) maxLimit() int64 {
	var m int64
	for _, r := range p.Rules {
		m = max(m, r.Limit)
	}
	return m
}

// minLimit returns the smallest limit of the policy: the most one request
// may cost. With shards it is the smallest share of a rule's limit.
func (p *Policy) minLimit() int64 {
	if p.InFlight > 0 {
		return p.InFlight
	}
	m := p.Rules[0].Limit
	for _, r := range p.Rules[1:] {
		m = min(m, r.Limit)
	}
	if p.Shards > 1 {
		m /= int64(p.Shards)
	}
	return m
}

// Validate reports whether the policy can work. The error wraps
// [ErrInvalidPolicy] and names the field at fault.
func (p Policy) Validate() error {
	if p.Name == "" {
		return fmt.Errorf("ratekit: policy Name is empty: %w", ErrInvalidPolicy)
	}
	for i := 0; i < len(p.Name); i++ {
		if c := p.Name[i]; c <= ' ' || c >= 0x7f || strings.IndexByte("{}\"\\", c) >= 0 {
			return fmt.Errorf("ratekit: policy Name %q must be visible ASCII without braces, spaces, quotes or backslashes: %w",
				p.Name, ErrInvalidPolicy)
		}
	}
	if len(p.Name) > 64 {
		return fmt.Errorf("ratekit: policy Name %q is longer than 64 bytes: %w", p.Name, ErrInvalidPolicy)
	}
	if p.InFlight != 0 || p.LeaseTTL != 0 {
		return p.validateInFlight()
	}
	if len(p.Rules) == 0 {
		return fmt.Errorf("ratekit: policy %q has no Rules: %w", p.Name, ErrInvalidPolicy)
	}
	if len(p.Rules) > 16 {
		return fmt.Errorf("ratekit: policy %q has %d Rules, at most 16 are allowed: %w", p.Name, len(p.Rules), ErrInvalidPolicy)
	}
	if p.Algorithm != SlidingLog && p.Algorithm != SlidingBuckets {
		return fmt.Errorf("ratekit: policy %q: unknown Algorithm %d: %w", p.Name, int(p.Algorithm), ErrInvalidPolicy)
	}
	if p.Buckets < 0 || p.Buckets > MaxBuckets {
		return fmt.Errorf("ratekit: policy %q Buckets is %d, must be within 0..%d: %w", p.Name, p.Buckets, MaxBuckets, ErrInvalidPolicy)
	}
	if p.Shards < 0 || p.Shards > MaxShards {
		return fmt.Errorf("ratekit: policy %q Shards is %d, must be within 0..%d: %w", p.Name, p.Shards, MaxShards, ErrInvalidPolicy)
	}
	for i, r := range p.Rules {
		if p.Shards > 1 && r.Limit >= 1 && r.Limit < int64(p.Shards) {
			return fmt.Errorf("ratekit: policy %q Shards is %d, more than Rules[%d].Limit %d: every shard needs at least one unit: %w",
				p.Name, p.Shards, i, r.Limit, ErrInvalidPolicy)
		}
		if r.Limit < 1 {
			return fmt.Errorf("ratekit: policy %q Rules[%d].Limit is %d, must be at least 1: %w", p.Name, i, r.Limit, ErrInvalidPolicy)
		}
		if p.Algorithm == SlidingLog && r.Limit > maxLogLimit {
			// One entry per unit: a larger limit would let one request
			// (cost up to the limit) stall the store.
			return fmt.Errorf("ratekit: policy %q Rules[%d].Limit %d is over %d, the most SlidingLog keeps one entry per unit for; use SlidingBuckets for large quotas: %w",
				p.Name, i, r.Limit, maxLogLimit, ErrInvalidPolicy)
		}
		if r.Window < minWindow {
			return fmt.Errorf("ratekit: policy %q Rules[%d].Window is %v, must be at least %v: %w", p.Name, i, r.Window, minWindow, ErrInvalidPolicy)
		}
		if r.Window%time.Microsecond != 0 {
			return fmt.Errorf("ratekit: policy %q Rules[%d].Window %v is not a whole number of microseconds: %w", p.Name, i, r.Window, ErrInvalidPolicy)
		}
		for j := range i {
			if p.Rules[j].Window == r.Window {
				// The smaller limit always binds; two rules of one window
				// would also share a name in headers and problem bodies.
				return fmt.Errorf("ratekit: policy %q Rules[%d] has the window of Rules[%d] (%v): keep the smaller limit only: %w",
					p.Name, i, j, r.Window, ErrInvalidPolicy)
			}
		}
	}
	return nil
}
