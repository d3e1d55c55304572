package guard

import (
	"context"
	"errors"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfunc"
)

// Wait is the pipeline of an outgoing request r, for adapters that
// throttle the calls an app makes (nethttp.Transport, grpclimit's client
// interceptors): skip, key and cost as for [Guard.Admit], then, instead of
// refusing a request over the limit, it waits with [core.Limiter.WaitN]
// until the request fits the guard's limit and then each limit added with
// [WithAlso], in order; units taken from one limit are held while the
// next is waited for.
//
// The verdict proceeds (OutcomeAllow, or OutcomeSkip when no limit had a
// key or r was skipped) unless:
//   - the key source or cost is malformed: OutcomeInvalid, as for Admit;
//   - the cost can never fit a limit: OutcomeDeny, Err wrapping
//     [core.ErrInvalidCost];
//   - ctx ended, or its deadline would pass before the request fits:
//     OutcomeUnavailable, Err wrapping ctx.Err() or
//     context.DeadlineExceeded.
//
// Such a verdict holds no units: those taken are refunded. Under
// [WithDryRun] Wait never waits: it decides once, and a request over the
// limit goes on at once, reported as [core.EventDryRun]. The answer
// options (headers, body) do not apply to outgoing requests.
func (g *Guard) Wait(ctx context.Context, r keyfunc.Request) Verdict {
	v := Verdict{g: g, by: &g.own}
	if g.cfg.skip != nil && g.cfg.skip(r) {
		v.Outcome = OutcomeSkip
		g.emit(ctx, &g.own, core.Event{Kind: core.EventSkip})
		return v
	}
	v.Cost = 1
	if g.cfg.cost != nil {
		if v.Cost = g.cfg.cost(r); v.Cost < 1 {
			v.Outcome, v.Err = OutcomeInvalid, errInvalidCost
			g.emit(ctx, &g.own, core.Event{Kind: core.EventKeyError, Cost: v.Cost, Err: errInvalidCost})
			return v
		}
	}
	v.Outcome = OutcomeSkip
	if !g.wait(ctx, &v, &g.own, r) {
		return v
	}
	for i := range g.cfg.also {
		if !g.wait(ctx, &v, &g.cfg.also[i], r) {
			return v
		}
	}
	return v
}

// wait keys r for lim and waits until it fits, folding the admission into
// v; it reports whether the pipeline goes on.
func (g *Guard) wait(ctx context.Context, v *Verdict, lim *limit, r keyfunc.Request) bool {
	key, err := lim.key(r)
	if err != nil {
		switch {
		case errors.Is(err, keyfunc.ErrNoKey) && g.cfg.noKey == NoKeyShared:
			key = SharedKey
		case errors.Is(err, keyfunc.ErrNoKey) && g.cfg.noKey != NoKeyReject:
			g.emit(ctx, lim, core.Event{Kind: core.EventSkip, Err: err})
			return true // no key for this limit only
		case !errors.Is(err, keyfunc.ErrNoKey) && g.cfg.keyErr == KeyErrorSkip:
			g.emit(ctx, lim, core.Event{Kind: core.EventKeyError, Err: err})
			return true
		default:
			return g.refuse(ctx, v, lim, OutcomeInvalid, err, core.EventKeyError)
		}
	}
	var d core.Decision
	if g.cfg.dryRun {
		d, err = lim.l.AllowN(ctx, key, v.Cost)
		if err == nil && !d.Allowed {
			g.emit(ctx, lim, core.Event{Kind: core.EventDryRun, Key: key, Cost: v.Cost, Decision: d})
			if v.nheld == 0 && !v.DryRun {
				v.Decision, v.Key, v.by = d, key, lim
			}
			v.Outcome, v.DryRun = OutcomeAllow, true
			return true
		}
	} else {
		d, err = lim.l.WaitN(ctx, key, v.Cost)
	}
	if err != nil {
		v.refundAll(ctx)
		v.Outcome, v.Decision, v.Key, v.by = OutcomeUnavailable, core.Decision{}, key, lim
		if errors.Is(err, core.ErrInvalidCost) {
			v.Outcome = OutcomeDeny
		}
		v.Err = err
		return false
	}
	if v.nheld == 0 {
		v.Decision, v.Key, v.by = d, key, lim
	}
	v.hold(held{lim: lim, key: key, d: d})
	v.Outcome = OutcomeAllow
	return true
}
