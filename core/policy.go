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

// MinWindow is the shortest window a [Rule] may have.
const MinWindow = time.Millisecond

// Rule says: at most Limit units in any sliding Window.
type Rule struct {
	// Limit is the number of units admitted per Window; at least 1.
	Limit int64
	// Window is the length of the sliding window; at least [MinWindow].
	Window time.Duration
}

// Algorithm selects how a store keeps a window.
type Algorithm int

const (
	// SlidingLog keeps one entry per admitted unit: exact, with memory that
	// grows with Limit. It fits limits up to some thousands per key. It is
	// the default.
	SlidingLog Algorithm = iota
	// SlidingBuckets splits each window into buckets and counts the oldest
	// partial bucket in full: it never admits more than the limit and
	// under-admits by at most one bucket, with memory bounded per key
	// whatever the limit. It suits large quotas (100,000 a day).
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
	// non-empty and must not contain '{', '}' or spaces.
	Name string
	// Rules must all have room for a request; at least one.
	Rules []Rule
	// Algorithm is how the store keeps the windows; SlidingLog by default.
	Algorithm Algorithm
	// Buckets is the number of buckets each window is split into under
	// SlidingBuckets; [DefaultBuckets] when 0. More buckets cost memory and
	// time per decision and under-admit less. Ignored by SlidingLog.
	Buckets int
}

// DefaultBuckets is the number of buckets per window under SlidingBuckets
// unless Policy.Buckets sets another.
const DefaultBuckets = 60

// MaxBuckets is the largest Policy.Buckets.
const MaxBuckets = 1000

// buckets returns the effective bucket count.
func (p *Policy) buckets() int {
	if p.Buckets == 0 {
		return DefaultBuckets
	}
	return p.Buckets
}

// minLimit returns the smallest limit of the policy.
func (p *Policy) minLimit() int64 {
	m := p.Rules[0].Limit
	for _, r := range p.Rules[1:] {
		m = min(m, r.Limit)
	}
	return m
}

// Validate reports whether the policy can work. The error wraps
// [ErrInvalidPolicy] and names the field at fault.
func (p Policy) Validate() error {
	if p.Name == "" {
		return fmt.Errorf("ratekit: policy Name is empty: %w", ErrInvalidPolicy)
	}
	if strings.ContainsAny(p.Name, "{} \t\r\n") {
		return fmt.Errorf("ratekit: policy Name %q must not contain braces or spaces: %w", p.Name, ErrInvalidPolicy)
	}
	if len(p.Name) > 64 {
		return fmt.Errorf("ratekit: policy Name %q is longer than 64 bytes: %w", p.Name, ErrInvalidPolicy)
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
	for i, r := range p.Rules {
		if r.Limit < 1 {
			return fmt.Errorf("ratekit: policy %q Rules[%d].Limit is %d, must be at least 1: %w", p.Name, i, r.Limit, ErrInvalidPolicy)
		}
		if r.Window < MinWindow {
			return fmt.Errorf("ratekit: policy %q Rules[%d].Window is %v, must be at least %v: %w", p.Name, i, r.Window, MinWindow, ErrInvalidPolicy)
		}
		if r.Window%time.Microsecond != 0 {
			return fmt.Errorf("ratekit: policy %q Rules[%d].Window %v is not a whole number of microseconds: %w", p.Name, i, r.Window, ErrInvalidPolicy)
		}
		for j := range i {
			if p.Rules[j] == r {
				return fmt.Errorf("ratekit: policy %q Rules[%d] duplicates Rules[%d] (%d per %v): %w", p.Name, i, j, r.Limit, r.Window, ErrInvalidPolicy)
			}
		}
	}
	return nil
}
