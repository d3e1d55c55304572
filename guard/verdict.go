package guard

import (
	"context"

	"github.com/ratekit/ratekit/core"
)

// Outcome classifies a [Verdict].
type Outcome uint8

const (
	// OutcomeAllow means decided and admitted; the request goes on.
	OutcomeAllow Outcome = iota
	// OutcomeSkip means not limited (skip predicate, no key); the request
	// goes on.
	OutcomeSkip
	// OutcomeDeny means over the limit: 429 (gRPC: ResourceExhausted).
	OutcomeDeny
	// OutcomeInvalid means a malformed request: its key source or its cost
	// (400, gRPC: InvalidArgument); 413 when its body is longer than the
	// key function may read ([keyfunc.ErrBodyTooLarge]).
	OutcomeInvalid
	// OutcomeUnavailable means the store failed under FailClosed, or the
	// request's context ended before a decision; 503 (gRPC: Unavailable).
	OutcomeUnavailable
	// OutcomeBlocked means refused by the block predicate ([WithBlock]):
	// 403 (gRPC: PermissionDenied).
	OutcomeBlocked
	// OutcomeChallenge means the request would reach a rule's Challenge
	// (core.Rule.Challenge) and the key has not passed one
	// (core.Limiter.Pass): the app must ask for a CAPTCHA or a second
	// factor before it goes on. It consumed nothing. By default 429 with
	// an application/problem+json body of type [ChallengeProblemType] and
	// no Retry-After (gRPC: Unauthenticated with an ErrorInfo of reason
	// CHALLENGE_REQUIRED); each adapter's WithChallengeHandler hands it to
	// the app instead.
	OutcomeChallenge
)

// String returns the outcome's name.
func (o Outcome) String() string {
	switch o {
	case OutcomeAllow:
		return "allow"
	case OutcomeSkip:
		return "skip"
	case OutcomeDeny:
		return "deny"
	case OutcomeInvalid:
		return "invalid"
	case OutcomeUnavailable:
		return "unavailable"
	case OutcomeBlocked:
		return "blocked"
	case OutcomeChallenge:
		return "challenge"
	}
	return "unknown"
}

// Verdict is what a [Guard] decided about one request and how to answer
// it. Adapters write it with [Verdict.WriteHeaders] and [Verdict.Answer]
// and call [Verdict.Finish] after the handler.
type Verdict struct {
	// Outcome classifies the verdict.
	Outcome Outcome
	// Decision is the decision the answer shows: the first admission, or
	// the denial or challenge. It is the zero Decision when no limiter
	// decided, and for a cost that can never fit.
	Decision core.Decision
	// Key is the key of that decision; empty when there was none.
	Key string
	// Cost is the units asked of every limit.
	Cost int64
	// DryRun reports a denial let through by dry-run mode.
	DryRun bool
	// Err says why, for OutcomeInvalid and OutcomeUnavailable, and for a
	// denial of a cost that can never fit. Never send it to the client.
	Err error

	g  *Guard
	by *limit // the limit whose decision the answer shows
	// The admissions to finish or refund: the first is Decision itself,
	// the others (limits added with WithAlso) are in more.
	nheld int
	more  []held
}

// held is one admission of a request after the first.
type held struct {
	lim *limit
	key string
	d   core.Decision
}

// Limiter returns the limiter whose decision the verdict shows: the
// guard's own, or the limit added with [WithAlso] that decided.
func (v *Verdict) Limiter() *core.Limiter { return v.by.l }

// Proceed reports whether the request goes on to the handler.
func (v *Verdict) Proceed() bool {
	return v.Outcome == OutcomeAllow || v.Outcome == OutcomeSkip
}

// admit records the admission d of lim under key: the first is the
// decision the answer shows; every one is kept for Finish or a later
// refund.
func (v *Verdict) admit(lim *limit, key string, d core.Decision) {
	if v.nheld == 0 {
		v.Decision, v.Key, v.by = d, key, lim
	} else {
		v.more = append(v.more, held{lim: lim, key: key, d: d})
	}
	v.nheld++
	v.Outcome = OutcomeAllow
}

// refundAll gives back every unit the request's admissions took. A failed
// refund is reported by the limiter; the units then stay counted.
func (v *Verdict) refundAll(ctx context.Context) {
	if v.nheld == 0 {
		return
	}
	ctx = detach(ctx)
	_ = v.Decision.Refund(ctx)
	for i := range v.more {
		_ = v.more[i].d.Refund(ctx)
	}
	v.nheld, v.more = 0, nil
}

// Finish completes the verdict after the handler answered status: it
// refunds the reserved units when [WithCountIf] says the request does not
// count, resets the key when [WithResetIf] says so, and releases the
// leases of InFlight policies (core.Policy.InFlight) whatever the status.
// It does nothing for requests that no limiter admitted, and releases
// nothing twice. The client may be gone by then: the refund, reset or
// release runs regardless, bounded by the limiters' store timeout. Store
// failures here go to the limiters' observers; the answer is already on
// its way.
func (v *Verdict) Finish(ctx context.Context, status int) {
	if v.Outcome != OutcomeAllow || v.nheld == 0 {
		return
	}
	ctx = detach(ctx)
	cfg := &v.g.cfg
	if cfg.resetIf != nil && cfg.resetIf(status) && v.by == &v.g.own {
		_ = v.by.l.Reset(ctx, v.Key)
		// The reset covers the guard's own limit only; limits added with
		// WithAlso are finished by count-if below.
		v.Decision = core.Decision{}
	}
	if cfg.countIf != nil && !cfg.countIf(status) {
		v.refundAll(ctx)
	}
	if v.g.release && v.nheld > 0 {
		// The request is over: its leases end. A refunded decision
		// refunds nothing twice.
		if v.by.inFlight {
			_ = v.Decision.Refund(ctx)
		}
		for i := range v.more {
			if v.more[i].lim.inFlight {
				_ = v.more[i].d.Refund(ctx)
			}
		}
	}
}

// detach returns ctx without its cancellation and deadline: a refund or
// reset runs even when the client has gone. A context that can end has a
// Done channel; one without needs no wrapper.
func detach(ctx context.Context) context.Context {
	if ctx.Done() == nil {
		return ctx
	}
	return context.WithoutCancel(ctx)
}
