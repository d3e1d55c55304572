package guard

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfunc"
)

// Wait is the pipeline of an outgoing request r, for adapters that
// throttle the calls an app makes (nethttp.Transport, grpclimit's client
// interceptors): block, skip, key and cost as for [Guard.Admit], then,
// instead of refusing a request over the limit, it waits until the
// request fits every limit: the guard's own and each added with
// [WithAlso].
//
// Every limit holds when Wait returns, the moment the request leaves:
// no unit is kept while another limit is waited for, where it would be
// dated when taken rather than when the request is sent. Wait waits for
// the first limit that has a key with [core.Limiter.WaitN], in line with
// the other callers of its key, then asks each other limit in order; when
// one of them denies, the units taken are given back, Wait sleeps until
// that denial's RetryAfter (plus a jitter below 2 ms and 1/200 of its
// window) and starts again.
//
// The verdict proceeds (OutcomeAllow, or OutcomeSkip when no limit had a
// key or r was skipped) unless:
//   - the block predicate refuses r ([WithBlock]): OutcomeBlocked, Err
//     [ErrBlocked];
//   - the key source or cost is malformed: OutcomeInvalid, as for Admit;
//   - the cost can never fit a limit: OutcomeDeny, Err wrapping
//     [core.ErrInvalidCost];
//   - a limit challenges r (core.Rule.Challenge, which [Guard.CheckOutbound]
//     refuses): OutcomeChallenge at once, since waiting passes no
//     challenge;
//   - ctx ended, or its deadline would pass before the request fits (a
//     denial's RetryAfter, or a wait in line, that ends after it):
//     OutcomeUnavailable, Err wrapping ctx.Err() or
//     context.DeadlineExceeded.
//
// Such a verdict holds no units: those taken are refunded. Under
// [WithDryRun] Wait never waits: it decides once, and a request over the
// limit goes on at once, reported as [EventDryRun]. The answer
// options (headers, body) do not apply to outgoing requests, and the
// options that cannot apply to them make [Guard.CheckOutbound] fail.
func (g *Guard) Wait(ctx context.Context, r keyfunc.Request) Verdict {
	v := Verdict{g: g, by: &g.own}
	if !g.prelude(ctx, &v, r) {
		return v
	}
	// Every key first: a malformed one refuses the request before it
	// waits, and the keys do not change between attempts.
	var stack [4]keyed
	ks := stack[:0]
	for i := -1; i < len(g.cfg.also); i++ {
		lim := &g.own
		if i >= 0 {
			lim = &g.cfg.also[i]
		}
		key, ok := g.keyOf(ctx, &v, lim, r)
		if ok {
			ks = append(ks, keyed{lim, key})
		} else if v.Outcome == OutcomeInvalid {
			return v
		}
	}
	switch {
	case len(ks) == 0:
	case g.cfg.dryRun:
		g.waitDry(ctx, &v, ks)
	default:
		g.waitAll(ctx, &v, ks)
	}
	return v
}

// keyed is a limit of an outgoing request and its key.
type keyed struct {
	lim *limit
	key string
}

// waitAll waits until the request fits every limit of ks, folding the
// admissions into v.
func (g *Guard) waitAll(ctx context.Context, v *Verdict, ks []keyed) {
	for {
		first := ks[0]
		d, err := first.lim.l.WaitN(ctx, first.key, v.Cost)
		if err != nil {
			g.fail(ctx, v, first.lim, first.key, err)
			return
		}
		if d.Challenged {
			v.Decision, v.Key, v.by, v.Outcome = d, first.key, first.lim, OutcomeChallenge
			return
		}
		v.admit(first.lim, first.key, d)
		var denied *keyed
		for i := 1; i < len(ks) && denied == nil; i++ {
			k := ks[i]
			if d, err = k.lim.l.AllowN(ctx, k.key, v.Cost); err != nil {
				g.fail(ctx, v, k.lim, k.key, err)
				return
			}
			if d.Allowed {
				v.admit(k.lim, k.key, d)
			} else {
				denied = &ks[i]
			}
		}
		if denied == nil {
			return
		}
		if d.Challenged {
			v.refundAll(ctx)
			v.Decision, v.Key, v.by, v.Outcome = d, denied.key, denied.lim, OutcomeChallenge
			return
		}
		// Nothing is kept while the limit that denied is waited for.
		v.refundAll(ctx)
		if err := pause(ctx, denied.lim.name, d); err != nil {
			g.fail(ctx, v, denied.lim, denied.key, err)
			return
		}
		v.Outcome = OutcomeSkip
	}
}

// waitDry decides the request once on every limit of ks, letting denials
// through as [WithDryRun] says.
func (g *Guard) waitDry(ctx context.Context, v *Verdict, ks []keyed) {
	for _, k := range ks {
		d, err := k.lim.l.AllowN(ctx, k.key, v.Cost)
		switch {
		case err != nil:
			g.fail(ctx, v, k.lim, k.key, err)
			return
		case d.Allowed:
			v.admit(k.lim, k.key, d)
		default:
			g.letThrough(ctx, v, k.lim, k.key, d)
		}
	}
}

// minPause is the shortest sleep after a denial, so that a denial with
// no RetryAfter cannot make a waiter spin on the store.
const minPause = 100 * time.Microsecond

// pause sleeps after denial d of policy until d's RetryAfter, plus a
// jitter below 2 ms and 1/200 of d's window so that waiters denied
// together do not ask again at once. It fails at once, with an error
// wrapping context.DeadlineExceeded, when the wait would end after ctx's
// deadline, and with ctx's error when ctx ends first.
func pause(ctx context.Context, policy string, d core.Decision) error {
	wait := max(d.RetryAfter, minPause)
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
		if d.Source == core.SourceClosed {
			return fmt.Errorf("ratekit: policy %q: store unavailable (FailClosed) for %v, past the context deadline: %w", policy, d.RetryAfter, context.DeadlineExceeded)
		}
		return fmt.Errorf("ratekit: policy %q: wait of %v would exceed the context deadline: %w", policy, d.RetryAfter, context.DeadlineExceeded)
	}
	if j := min(d.Window/200, 2*time.Millisecond); j > 0 {
		wait += rand.N(j)
		if dl, ok := ctx.Deadline(); ok {
			wait = min(wait, time.Until(dl))
		}
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("ratekit: policy %q: %w", policy, ctx.Err())
	}
}

// CheckOutbound returns an error naming what of g the outgoing pipeline
// ([Guard.Wait]) cannot honour, nil when there is nothing:
//   - [WithCountIf] and [WithResetIf]: an outgoing request has no handler
//     whose status could say whether it counts;
//   - a limit whose policy is an InFlight policy (core.Policy.InFlight):
//     nothing would release the lease of a request sent;
//   - a limit whose policy has a Challenge (core.Rule.Challenge): nobody
//     is there to answer it.
//
// Adapters that throttle outgoing requests (nethttp.Transport,
// grpclimit's client interceptors) call it at construction and panic
// with its error: a programmer error caught at start-up, never a surprise
// at request time. The answer options (WithHeaders, WithBody) are
// accepted and have no effect.
func (g *Guard) CheckOutbound() error {
	var why []string
	if g.cfg.countIf != nil {
		why = append(why, "WithCountIf does not apply to outgoing requests: they have no handler status to count by")
	}
	if g.cfg.resetIf != nil {
		why = append(why, "WithResetIf does not apply to outgoing requests: they have no handler status to reset by")
	}
	for i := -1; i < len(g.cfg.also); i++ {
		lim := &g.own
		if i >= 0 {
			lim = &g.cfg.also[i]
		}
		if lim.inFlight {
			why = append(why, fmt.Sprintf("InFlight policy %q does not apply to outgoing requests: nothing would release the lease of a request sent", lim.name))
		}
		if lim.challenge {
			why = append(why, fmt.Sprintf("policy %q has a Rules[].Challenge, which does not apply to outgoing requests: nobody is there to answer it", lim.name))
		}
	}
	if len(why) == 0 {
		return nil
	}
	return errors.New("ratekit: guard: " + strings.Join(why, "; "))
}
