package core

import (
	"context"
	"time"
)

// EventKind says what an [Event] reports.
type EventKind uint8

const (
	// EventDecision reports a decision; Event.Decision holds it.
	EventDecision EventKind = iota
	// EventStoreError reports a failed store call; Event.Err holds the
	// error. The fallback decision is reported next as an EventDecision.
	// A call the limiter makes on its own (adding its top refused keys to
	// the store) reports it too, with no decision after it; without an
	// observer, one whose counts were dropped (it timed out, so the store
	// may have added them) is logged through log/slog's default logger.
	EventStoreError
	// EventBreakerOpen reports that the circuit breaker opened: store
	// calls stop for the cool-down and the failure policy answers.
	EventBreakerOpen
	// EventBreakerClose reports that a probe succeeded and store calls
	// resume.
	EventBreakerClose
	// EventStoreCheck reports a failed [Limiter.Check]: a store configured
	// so that limits may not hold, such as a Redis that can evict limiter
	// keys ([ErrUnsafeEviction]). Event.Err holds why.
	EventStoreCheck
	// The kinds of the middleware of package guard (every adapter's):
	// guard.EventSkip, guard.EventKeyError, guard.EventDryRun and
	// guard.EventBlock, which String names too.
	eventSkip
	eventKeyError
	eventDryRun
	eventBlock
	// EventFallbackStart reports that the limiter began deciding by its
	// failure policy because the store failed: once per episode, not per
	// decision. Event.Err holds the failure that began it (nil when an
	// open circuit breaker did). A limiter without observers logs it
	// through log/slog's default logger instead.
	EventFallbackStart
	// EventFallbackEnd reports that decisions come from the store again,
	// a second after the last one made by the failure policy;
	// Event.Fallbacks holds how many were made in the episode. A limiter
	// without observers logs it through log/slog's default logger
	// instead.
	EventFallbackEnd
	// EventPass reports that a key passed a challenge and the store
	// recorded it ([Limiter.Pass]): its requests go on past the
	// policy's Challenge thresholds (a pass the store failed to record
	// is an EventStoreError instead). A
	// challenged request is an EventDecision with Decision.Challenged
	// set, as a lockout is one with Decision.Locked.
	EventPass
	// EventRulesDiffer reports that the store says other instances use
	// the policy's name with another configuration (rules, algorithm,
	// lockout or tiers): each limits the keys its own way. Event.Err
	// says how many configurations and names their fingerprints; it is
	// nil when they agree again. It comes when the store first tells,
	// and at every change; [Limiter.Check] reports it too. A limiter
	// without observers logs it through log/slog's default logger.
	EventRulesDiffer
)

// String returns the kind's name.
func (k EventKind) String() string {
	switch k {
	case EventDecision:
		return "decision"
	case EventStoreError:
		return "store_error"
	case EventBreakerOpen:
		return "breaker_open"
	case EventBreakerClose:
		return "breaker_close"
	case EventStoreCheck:
		return "store_check"
	case eventSkip:
		return "skip"
	case eventKeyError:
		return "key_error"
	case eventDryRun:
		return "dry_run"
	case eventBlock:
		return "block"
	case EventFallbackStart:
		return "fallback_start"
	case EventFallbackEnd:
		return "fallback_end"
	case EventPass:
		return "pass"
	case EventRulesDiffer:
		return "rules_differ"
	}
	return "unknown"
}

// Event is what an [Observer] sees. Fields may be added.
type Event struct {
	// Kind says what happened.
	Kind EventKind
	// Policy is the policy name.
	Policy string
	// Key is the key decided on, after length bounding; empty when there
	// was none.
	Key string
	// Cost is the units asked for.
	Cost int64
	// Decision is set for EventDecision and guard.EventDryRun.
	Decision Decision
	// Err is set for EventStoreError, EventStoreCheck and
	// guard.EventKeyError, and for guard.EventSkip when the request had no
	// key.
	Err error
	// Latency is how long the store call took, for EventDecision and
	// EventStoreError made by a store across the network (not a
	// MemoryStore, whose decisions are not timed).
	Latency time.Duration
	// Fallbacks is, for EventFallbackEnd, the number of decisions the
	// failure policy made in the episode.
	Fallbacks int64
}

// Observer sees the events of a [Limiter] ([WithObserver]) or of a
// middleware. Observe is called synchronously on the request path, outside
// any lock: it must be fast and safe for concurrent use.
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// ObserverFunc adapts a function to an [Observer].
type ObserverFunc func(ctx context.Context, e Event)

// Observe calls f(ctx, e).
func (f ObserverFunc) Observe(ctx context.Context, e Event) { f(ctx, e) }

// observers calls several observers in order.
type observers []Observer

func (o observers) Observe(ctx context.Context, e Event) {
	for _, x := range o {
		x.Observe(ctx, e)
	}
}

// join returns an observer that calls a then b, skipping nils.
func join(a, b Observer) Observer {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return observers{a, b}
}
