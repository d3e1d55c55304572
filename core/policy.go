package core

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ratekit/ratekit/core/driver"
)

// ErrInvalidPolicy is wrapped by the error [NewLimiter] returns for a policy
// or option that cannot work. The message names the field at fault.
var ErrInvalidPolicy = errors.New("invalid policy")

// ErrInvalidCost is wrapped by the error [Limiter.AllowN] returns when n is
// below 1 or above the limit of a rule, so that no request could ever fit.
var ErrInvalidCost = errors.New("invalid cost")

// minWindow is the shortest window a Rule may have.
const minWindow = time.Millisecond

// Rule says: at most Limit units in any sliding Window, or, for a
// calendar rule, in each calendar period (1,000,000 a month, from 00:00 on
// the 1st in the customer's time zone).
type Rule struct {
	// Limit is the number of units admitted per Window or period; at
	// least 1.
	Limit int64
	// Window is the length of the sliding window: at least 1 ms, in
	// whole microseconds. It is 0 for a calendar rule.
	Window time.Duration
	// Calendar makes the rule count per calendar period instead of a
	// sliding window: at most Limit units from the start of the current
	// Day, Week or Month in Location, counted anew from the next. A
	// period's count is one counter per key that expires after the
	// period ends, so its memory is bounded whatever the limit, under
	// either Algorithm. Each rule of a policy needs a period or window of
	// its own. 0 (the default) means a sliding Window.
	Calendar Calendar
	// Location is the time zone of a Calendar rule's periods; UTC when
	// nil. Periods follow its clock changes: a Day is 23 or 25 hours long
	// across a daylight-saving change. It must be nil for a sliding rule.
	Location *time.Location
	// Challenge, when set, is a soft threshold below Limit: a request
	// that every rule admits, but whose units would bring this rule's
	// count to Challenge or more, is challenged instead
	// ([Decision.Challenged]) unless the key has passed a challenge
	// lately ([Limiter.Pass]): the app asks for a CAPTCHA or a second
	// factor before it refuses outright. A challenged request records
	// nothing and starts no lockout, so it counts toward no limit; the
	// requests made after a pass count as any other, up to Limit. With
	// Limit 5 and Challenge 3, requests 1 and 2 are admitted and request
	// 3 is challenged, as is every later one until the key passes; then
	// requests 3, 4 and 5 are admitted and request 6 is denied.
	//
	// It is exact across instances as the limit is: the store decides
	// the challenge in the same atomic step as the rules, and keeps the
	// pass with the key's counts (the store must implement
	// [driver.Challenges]). 0 (the default) means no challenge; else 1 to
	// Limit-1. A policy with a Challenge cannot have Shards, and under
	// [WithTiers] either every tier has one (on some rule) or none has.
	Challenge int64
}

// Calendar is the calendar period of a [Rule] that counts per period:
// [Day], [Week] or [Month]; 0 for a sliding rule.
type Calendar = driver.Calendar

// The calendar periods.
const (
	// Day runs from 00:00 to 00:00 the next day.
	Day = driver.Day
	// Week runs from Monday 00:00 to the next Monday 00:00 (ISO 8601).
	Week = driver.Week
	// Month runs from 00:00 on the 1st to 00:00 on the 1st of the next
	// month.
	Month = driver.Month
)

// Lockout keeps a key refused for a while after the policy denied it,
// even if it stops trying: 20 failed logins an hour from one address lock
// that address out for a day (fail2ban's ban). The lockout lives in the
// store next to the key's windows, so every instance refuses the key
// until it ends, and expires by itself; [Limiter.Reset] lifts it.
//
// A lockout starts when a Take of the key is denied by one of the
// policy's rules; a Peek, a Take refused by the lockout itself and a
// [Decision.Refund] neither start, extend nor lift one. Units count while
// they are held, even those to be refunded: a "count only failures"
// middleware reserves one per request in flight, so more concurrent
// requests from a key than its limit lock it out, whatever they turn out
// to be: give such a policy a limit above what one key sends at once.
// While it lasts, every request of the key is denied with
// [Decision.Locked] set and a RetryAfter that runs to the end of the
// lockout (or later, if a rule is full longer), whatever its cost and
// whatever room the rules have.
type Lockout struct {
	// For is how long a key stays refused after a denial; 0 (the
	// default) means no lockout. At least 1 ms, in whole microseconds.
	For time.Duration
	// Max, when above For, makes every repeat offence lock the key twice
	// as long as the one before (For, 2×For, 4×For, ...), up to Max; the
	// offences are forgotten once the key has gone Max without a
	// lockout after its last one ended. 0 (the default): every lockout
	// lasts For.
	Max time.Duration
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
	// 16, each with a window (or calendar period) of its own.
	Rules []Rule
	// Algorithm is how the store keeps the windows; SlidingLog by default.
	Algorithm Algorithm
	// Buckets is the number of buckets each window is split into under
	// SlidingBuckets; 60 when 0. More buckets cost memory and time per
	// decision, under-admit less and shorten the longest wait, which is
	// Window + Window/Buckets (see [SlidingBuckets]); at most 1000.
	// Ignored by SlidingLog.
	Buckets int
	// Lockout keeps a key refused for a while after a denial; none by
	// default. It holds for every tier of [WithTiers]; it cannot be
	// combined with Shards, whose shards decide apart.
	Lockout Lockout
	// Shards splits every key over this many store keys, each holding its
	// share of every rule's limit, so that one very hot key (a global cap)
	// spreads over several Redis Cluster slots; 0 or 1 (the default)
	// means one key. It never admits more than a rule's Limit, but it can
	// deny a request while other shards still have room: see "Hot keys"
	// in the package documentation. Each rule's Limit must be at least
	// Shards; at most 256.
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
	// Allow and Deny are keys the policy decides without its store: a key
	// on Deny is refused (Decision.Listed set, RetryAfter a hint of one
	// hour, since the list decides for as long as the app runs with it),
	// and a key on Allow is admitted and counted nowhere. Deny wins over
	// Allow. An entry is a key matched exactly, or a CIDR prefix
	// ("203.0.113.0/24", "2001:db8::/32") that holds every key that is an
	// IP address within it, or an address prefix within it (the /64 key of
	// an IPv6 client grouped by keyfunc.ClientIP); addresses match in any
	// spelling. At most 10,000 entries each, 256 of them prefixes. A key
	// on either list takes no [Grant].
	Allow, Deny []string
}

// maxRules is the most rules a policy may have.
const maxRules = driver.MaxRules

// inlineRules is how many rule states a Decision holds without an
// allocation (driver.RuleStates).
const inlineRules = 4

// maxLogLimit is the largest Limit of a SlidingLog rule.
const maxLogLimit = 100_000

// defaultBuckets is the number of buckets per window under SlidingBuckets
// unless Policy.Buckets sets another.
const defaultBuckets = 60

// maxBuckets is the largest Policy.Buckets.
const maxBuckets = 1000

// buckets returns the effective bucket count.
func (p *Policy) buckets() int {
	if p.Buckets == 0 {
		return defaultBuckets
	}
	return p.Buckets
}

// maxLimit returns the largest limit of the policy's sliding rules: the
// most units a SlidingLog key keeps.
func (p *Policy) maxLimit() int64 { return slidingMax(p.Rules) }

// slidingMax returns the largest limit of the sliding rules of rules.
func slidingMax(rules []Rule) int64 {
	var m int64
	for _, r := range rules {
		if r.Calendar == 0 {
			m = max(m, r.Limit)
		}
	}
	return m
}

// hasChallenge reports whether a rule of rules has a Challenge.
func hasChallenge(rules []Rule) bool {
	for i := range rules {
		if rules[i].Challenge > 0 {
			return true
		}
	}
	return false
}

// hasCalendar reports whether rules hold a calendar rule.
func hasCalendar(rules []Rule) bool {
	for i := range rules {
		if rules[i].Calendar != 0 {
			return true
		}
	}
	return false
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
	if err := p.validateName(); err != nil {
		return err
	}
	if _, err := p.parseLists(); err != nil {
		return err
	}
	if p.InFlight != 0 || p.LeaseTTL != 0 {
		return p.validateInFlight()
	}
	if err := p.validateShape(); err != nil {
		return err
	}
	if err := p.validateLockout(); err != nil {
		return err
	}
	if p.Shards > 1 && hasChallenge(p.Rules) {
		// Each shard decides alone on its share: no shard sees the
		// key's count, which the threshold is about.
		return fmt.Errorf("ratekit: policy %q has a Rules[].Challenge and Shards %d: a key's shards decide apart, so no count reaches the threshold: %w",
			p.Name, p.Shards, ErrInvalidPolicy)
	}
	for i := range p.Rules {
		if err := p.validateRule(i); err != nil {
			return err
		}
	}
	return nil
}

// validateName checks the policy's Name: it becomes a key namespace and
// a metrics label.
func (p *Policy) validateName() error {
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
	return nil
}

// validateShape checks the fields of a rate policy that are not rules:
// the number of Rules, Algorithm, Buckets and Shards.
func (p *Policy) validateShape() error {
	if len(p.Rules) == 0 {
		return fmt.Errorf("ratekit: policy %q has no Rules: %w", p.Name, ErrInvalidPolicy)
	}
	if len(p.Rules) > maxRules {
		return fmt.Errorf("ratekit: policy %q has %d Rules, at most %d are allowed: %w", p.Name, len(p.Rules), maxRules, ErrInvalidPolicy)
	}
	if p.Algorithm != SlidingLog && p.Algorithm != SlidingBuckets {
		return fmt.Errorf("ratekit: policy %q: unknown Algorithm %d: %w", p.Name, int(p.Algorithm), ErrInvalidPolicy)
	}
	if p.Buckets < 0 || p.Buckets > maxBuckets {
		return fmt.Errorf("ratekit: policy %q Buckets is %d, must be within 0..%d: %w", p.Name, p.Buckets, maxBuckets, ErrInvalidPolicy)
	}
	if p.Shards < 0 || p.Shards > maxShards {
		return fmt.Errorf("ratekit: policy %q Shards is %d, must be within 0..%d: %w", p.Name, p.Shards, maxShards, ErrInvalidPolicy)
	}
	return nil
}

// validateRule checks rule i.
func (p *Policy) validateRule(i int) error {
	r := p.Rules[i]
	if p.Shards > 1 && r.Limit >= 1 && r.Limit < int64(p.Shards) {
		return fmt.Errorf("ratekit: policy %q Shards is %d, more than Rules[%d].Limit %d: every shard needs at least one unit: %w",
			p.Name, p.Shards, i, r.Limit, ErrInvalidPolicy)
	}
	if r.Limit < 1 {
		return fmt.Errorf("ratekit: policy %q Rules[%d].Limit is %d, must be at least 1: %w", p.Name, i, r.Limit, ErrInvalidPolicy)
	}
	if r.Challenge < 0 || r.Challenge >= r.Limit {
		return fmt.Errorf("ratekit: policy %q Rules[%d].Challenge must be below Limit (%d) and not negative (0: no challenge), not %d: %w",
			p.Name, i, r.Limit, r.Challenge, ErrInvalidPolicy)
	}
	if r.Calendar != 0 {
		return p.validateCalendar(i)
	}
	return p.validateSliding(i)
}

// validateSliding checks sliding rule i.
func (p *Policy) validateSliding(i int) error {
	r := p.Rules[i]
	if r.Location != nil {
		return fmt.Errorf("ratekit: policy %q Rules[%d].Location is set but Calendar is not: a sliding window has no time zone: %w",
			p.Name, i, ErrInvalidPolicy)
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
		if p.Rules[j].Window == r.Window && p.Rules[j].Calendar == 0 {
			// The smaller limit always binds; two rules of one window
			// would also share a name in headers and problem bodies.
			return fmt.Errorf("ratekit: policy %q Rules[%d] has the window of Rules[%d] (%v): keep the smaller limit only: %w",
				p.Name, i, j, r.Window, ErrInvalidPolicy)
		}
	}
	return nil
}

// validateCalendar checks calendar rule i.
func (p *Policy) validateCalendar(i int) error {
	r := p.Rules[i]
	if r.Calendar > Month {
		return fmt.Errorf("ratekit: policy %q Rules[%d].Calendar: unknown %v: %w", p.Name, i, r.Calendar, ErrInvalidPolicy)
	}
	if r.Window != 0 {
		return fmt.Errorf("ratekit: policy %q Rules[%d].Window is %v, must be 0 with Calendar %v: a rule counts per period or per window: %w",
			p.Name, i, r.Window, r.Calendar, ErrInvalidPolicy)
	}
	for j := range i {
		if p.Rules[j].Calendar == r.Calendar {
			// The smaller limit always binds (in one location), and the
			// two would share a name in headers and problem bodies.
			return fmt.Errorf("ratekit: policy %q Rules[%d] has the Calendar of Rules[%d] (%v): keep one rule per period: %w",
				p.Name, i, j, r.Calendar, ErrInvalidPolicy)
		}
	}
	return nil
}

// validateLockout checks p.Lockout.
func (p *Policy) validateLockout() error {
	lo := p.Lockout
	switch {
	case lo.For == 0 && lo.Max == 0:
		return nil
	case lo.For < minWindow || lo.For%time.Microsecond != 0:
		return fmt.Errorf("ratekit: policy %q Lockout.For is %v, must be at least %v in whole microseconds (or 0 with Max 0 for no lockout): %w",
			p.Name, lo.For, minWindow, ErrInvalidPolicy)
	case lo.Max != 0 && (lo.Max < lo.For || lo.Max%time.Microsecond != 0):
		return fmt.Errorf("ratekit: policy %q Lockout.Max is %v, must be 0 or at least Lockout.For (%v) in whole microseconds: %w",
			p.Name, lo.Max, lo.For, ErrInvalidPolicy)
	case p.Shards > 1:
		// Each shard decides alone: a lockout of one shard would let the
		// key in through the others.
		return fmt.Errorf("ratekit: policy %q has a Lockout and Shards %d: a key's shards decide apart, so a lockout cannot hold for the key: %w",
			p.Name, p.Shards, ErrInvalidPolicy)
	}
	return nil
}

// defaultLeaseTTL is Policy.LeaseTTL when 0.
const defaultLeaseTTL = 30 * time.Second

// minLeaseTTL is the shortest Policy.LeaseTTL: renewals every third of
// it must have time to reach the store.
const minLeaseTTL = time.Second

// leaseTTL returns the effective lease TTL.
func (p *Policy) leaseTTL() time.Duration {
	if p.LeaseTTL == 0 {
		return defaultLeaseTTL
	}
	return p.LeaseTTL
}

// validateInFlight is Validate for a policy with InFlight or LeaseTTL set.
func (p *Policy) validateInFlight() error {
	switch {
	case p.InFlight < 0:
		return fmt.Errorf("ratekit: policy %q InFlight is %d, must not be negative: %w", p.Name, p.InFlight, ErrInvalidPolicy)
	case p.InFlight == 0:
		return fmt.Errorf("ratekit: policy %q has a LeaseTTL but InFlight is 0: LeaseTTL applies to InFlight policies only: %w",
			p.Name, ErrInvalidPolicy)
	case p.InFlight > maxLogLimit:
		return fmt.Errorf("ratekit: policy %q InFlight %d is over %d: %w", p.Name, p.InFlight, maxLogLimit, ErrInvalidPolicy)
	case len(p.Rules) > 0:
		return fmt.Errorf("ratekit: policy %q has both InFlight and Rules: a policy limits requests in flight or requests per window, not both; "+
			"decide two limiters together (guard.WithAlso, core.AllowAll): %w", p.Name, ErrInvalidPolicy)
	case p.Algorithm != SlidingLog || p.Buckets != 0:
		return fmt.Errorf("ratekit: policy %q: Algorithm and Buckets do not apply to an InFlight policy: %w", p.Name, ErrInvalidPolicy)
	case p.Shards > 1:
		return fmt.Errorf("ratekit: policy %q: Shards does not apply to an InFlight policy: %w", p.Name, ErrInvalidPolicy)
	case p.Lockout != (Lockout{}):
		return fmt.Errorf("ratekit: policy %q: Lockout does not apply to an InFlight policy: a key is never denied for what it did before: %w",
			p.Name, ErrInvalidPolicy)
	case p.Shards < 0:
		return fmt.Errorf("ratekit: policy %q Shards is %d, must be within 0..%d: %w", p.Name, p.Shards, maxShards, ErrInvalidPolicy)
	case p.LeaseTTL != 0 && p.LeaseTTL < minLeaseTTL:
		return fmt.Errorf("ratekit: policy %q LeaseTTL is %v, must be at least %v: %w", p.Name, p.LeaseTTL, minLeaseTTL, ErrInvalidPolicy)
	case p.LeaseTTL%time.Millisecond != 0:
		return fmt.Errorf("ratekit: policy %q LeaseTTL %v is not a whole number of milliseconds: %w", p.Name, p.LeaseTTL, ErrInvalidPolicy)
	}
	return nil
}

// maxShards is the largest Policy.Shards.
const maxShards = 256
