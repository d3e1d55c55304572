package core

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/ratekit/ratekit/core/driver"
)

// What a limiter does while its store fails, and how it gets ready for
// it while the store answers.
//
// Under FailLocal a limiter on a shared store keeps a local MemoryStore
// that mirrors what the store told it: every admission it made through
// the store (so a fallback window starts from this instance's own recent
// admissions, not from zero) and every lockout it saw. When the store
// fails, the local store decides with each rule's share of the limit:
// ⌊Limit / N⌋, at least 1, where N is the number of instances the store
// counted for the policy ([driver.Fleet]), so the fleet as a whole admits about
// the limit rather than N times it. [WithLocalShare] (false) gives each
// instance the whole limit instead.
//
// A limiter that starts deciding by its failure policy says so once, and
// once again when the store answers, with the number of decisions made
// meanwhile ([EventFallbackStart], [EventFallbackEnd]); without an
// observer it logs both through log/slog's default logger.

// fallbackQuiet is how long a limiter must go without a fallback decision
// before a decision of the store ends its fallback episode: a store that
// fails one call in ten does not start and end an episode every few
// calls.
const fallbackQuiet = time.Second

// fellBack records a decision of q made by the failure policy because
// the store failed (cause; nil when the breaker was open), reporting the
// start of an episode.
func (l *Limiter) fellBack(ctx context.Context, cause error, q *driver.Query) {
	l.episode.count.Add(1)
	l.episode.last.Store(time.Now().UnixNano())
	if l.episode.on.CompareAndSwap(false, true) {
		l.notice(ctx, Event{Kind: EventFallbackStart, Err: cause})
		l.watch(*q)
	}
}

// watch asks the store about q's key every fallbackQuiet while a
// fallback episode is on, through the circuit breaker as a decision would
// (a probe, which takes nothing), so that the end of an outage is noticed
// when the store answers again, not at the next decision that reaches it:
// the episode's end is reported, and what the failure policy admitted
// is counted in the store, while every request is still answered from the
// deny cache. It stops when the episode ends or the store is closed.
func (l *Limiter) watch(q driver.Query) {
	var tick func()
	tick = func() {
		if !l.episode.on.Load() {
			return
		}
		_, _, cause, _ := l.call(context.Background(), &q, true, func(ctx context.Context, _ bool) error {
			return l.d.probe(ctx, &q)
		})
		if l.episode.on.Load() && !errors.Is(cause, driver.ErrClosed) {
			time.AfterFunc(fallbackQuiet, tick)
		}
	}
	time.AfterFunc(fallbackQuiet, tick)
}

// answered records a decision of the store at now, reporting the end of
// a fallback episode.
func (l *Limiter) answered(ctx context.Context, now time.Time) {
	if !l.episode.on.Load() || now.UnixNano()-l.episode.last.Load() < int64(fallbackQuiet) {
		return
	}
	if l.episode.on.CompareAndSwap(true, false) {
		l.notice(ctx, Event{Kind: EventFallbackEnd, Fallbacks: l.episode.count.Swap(0)})
	}
}

// notice reports an event that must never go unseen: to the observers,
// or, when the limiter has none, through log/slog's default logger.
func (l *Limiter) notice(ctx context.Context, e Event) {
	if l.observer != nil {
		l.emit(ctx, e)
		return
	}
	switch e.Kind {
	case EventFallbackStart:
		why := "circuit breaker open"
		if e.Err != nil {
			why = e.Err.Error()
		}
		slog.Default().WarnContext(ctx, "ratekit: store failed; deciding by the failure policy until it answers",
			"policy", l.policy.Name, "failure_policy", l.failure.String(), "error", why)
	case EventFallbackEnd:
		slog.Default().InfoContext(ctx, "ratekit: store answers again; decisions come from it",
			"policy", l.policy.Name, "fallback_decisions", e.Fallbacks)
	case EventStoreError: // a call of the limiter's own, not of a decision
		slog.Default().WarnContext(ctx, "ratekit: a background store call failed", "policy", l.policy.Name, "error", e.Err.Error())
	case EventRulesDiffer:
		if e.Err != nil {
			slog.Default().ErrorContext(ctx, "ratekit: other instances use this policy name with other rules", "policy", l.policy.Name, "error", e.Err.Error())
		} else {
			slog.Default().InfoContext(ctx, "ratekit: every instance uses this policy's rules again", "policy", l.policy.Name)
		}
	}
}

// fallback decides without the store.
func (l *Limiter) fallback(q driver.Query, shard int, take bool, br *breaker) Decision {
	switch l.failure {
	case FailOpen:
		r := l.minRule()
		d := Decision{Allowed: true, Limit: l.minLimit, Window: l.window(r), Remaining: l.minLimit, Rule: r, Source: SourceOpen}
		if take && l.replay != nil {
			if p := l.replay.add(q.Key, shard, q.N, l.now()); p != nil {
				d.ticket = ticket{owner: l.d, key: q.Key, shard: shard, n: q.N, local: true, pend: p}
			}
		}
		return d
	case FailClosed:
		r := l.minRule()
		return Decision{Limit: l.minLimit, Window: l.window(r), RetryAfter: br.retryAfter(time.Now()), Rule: r, Source: SourceClosed}
	}
	// The local store works without the store timeout: it never blocks.
	var buf [maxRules]driver.Rule
	q.Rules = l.shareOf(q.Rules, buf[:0])
	var d Decision
	l.fb.Decide(&q, take, &d.res)
	l.bind(&d, d.res.Allowed, SourceLocal)
	if take && d.res.Allowed {
		d.ticket = ticket{owner: l.d, key: q.Key, shard: shard, at: d.res.At, n: q.N, local: true}
		if l.replay != nil {
			d.ticket.pend = l.replay.add(q.Key, shard, q.N, l.now())
		}
	}
	return d
}

// shareOf returns rules with the limits this instance admits on its own
// while the store fails (see WithLocalShare), appended to buf, or rules
// itself when they are whole. A Challenge is shared as its limit is, so
// that an instance challenges its share of the requests.
func (l *Limiter) shareOf(rules, buf []driver.Rule) []driver.Rule {
	n := 1
	if l.fleet != nil && !l.wholeLimit {
		n = l.fleet()
	}
	if n <= 1 {
		return rules
	}
	for _, r := range rules {
		r.Limit = max(1, r.Limit/int64(n))
		if r.Challenge > 0 {
			r.Challenge = max(1, r.Challenge/int64(n))
		}
		buf = append(buf, r)
	}
	return buf
}

// mirror records in the local fallback store the units the store
// admitted for q, and returns their local time for a refund; 0 when the
// limiter has no local store.
func (l *Limiter) mirror(q *driver.Query) int64 {
	if l.fb == nil {
		return 0
	}
	return l.fb.Record(q)
}

// mirrorLock records in the local fallback store that the store locked
// q.Key out for d.
func (l *Limiter) mirrorLock(q *driver.Query, d time.Duration) {
	if l.fb != nil && d > 0 {
		l.fb.LockFor(q, d)
	}
}
