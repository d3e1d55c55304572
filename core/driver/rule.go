package driver

import (
	"fmt"
	"time"
)

// Rule is one rule of a [Query]: at most Limit units in any sliding
// Window, or, for a calendar rule, in each calendar period.
type Rule struct {
	// Limit is the number of units admitted per Window or period.
	Limit int64
	// Window is the length of the sliding window, in whole microseconds;
	// 0 for a calendar rule.
	Window time.Duration
	// Calendar makes the rule count per calendar period of Location
	// ([Rule.Period]); 0 means a sliding Window.
	Calendar Calendar
	// Location is the time zone of a calendar rule's periods; UTC when
	// nil.
	Location *time.Location
	// Challenge, when above 0, is the rule's soft threshold below Limit
	// (see [Challenges]).
	Challenge int64
}

// Calendar is the calendar period of a [Rule] that counts per period.
type Calendar uint8

// The calendar periods.
const (
	// Day runs from 00:00 to 00:00 the next day.
	Day Calendar = iota + 1
	// Week runs from Monday 00:00 to the next Monday 00:00 (ISO 8601).
	Week
	// Month runs from 00:00 on the 1st to 00:00 on the 1st of the next
	// month.
	Month
)

// String returns the period's name: "day", "week" or "month"; "none" for
// the 0 of a sliding rule.
func (c Calendar) String() string {
	switch c {
	case 0:
		return "none"
	case Day:
		return "day"
	case Week:
		return "week"
	case Month:
		return "month"
	}
	return fmt.Sprintf("Calendar(%d)", int(c))
}

// Algorithm selects how a store keeps a window.
type Algorithm int

// The algorithms.
const (
	// SlidingLog keeps one entry per admitted unit, up to [Query].Keep:
	// exact.
	SlidingLog Algorithm = iota
	// SlidingBuckets counts units in buckets [Query.BucketWidth] wide and
	// counts a bucket in full while any part of it is in the window: it
	// never admits more than the limit and under-admits by at most one
	// bucket.
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

// Lockout keeps a key refused for a while after a denial: For after the
// first, doubled on every repeat offence up to Max when Max is above For.
// The offences are forgotten once the key has gone Max without a lockout
// after its last one ended.
type Lockout struct {
	For, Max time.Duration
}

// CheckRules returns an error wrapping [ErrInvalidQuery] for rules no
// store can count: more than [MaxRules], or an unknown calendar period. A
// limiter sends none; a store called directly checks.
func CheckRules(rules []Rule) error {
	if len(rules) > MaxRules {
		return fmt.Errorf("%d rules, at most %d: %w", len(rules), MaxRules, ErrInvalidQuery)
	}
	for i, r := range rules {
		if r.Calendar > Month {
			return fmt.Errorf("Rules[%d].Calendar: unknown %v: %w", i, r.Calendar, ErrInvalidQuery)
		}
	}
	return nil
}

// MaxRules is the most rules a [Query] has.
const MaxRules = 16
