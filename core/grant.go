package core

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/core/internal/netlist"
)

// deniedRetry is the RetryAfter of a key on a policy's Deny list: a hint,
// since the list decides for as long as the app runs with it.
const deniedRetry = time.Hour

// grantTimeout is the least time a grant's store calls get: a few round
// trips, made by an operator, not on a request's path.
const grantTimeout = time.Second

// grantCtx returns the context of a grant's store call: the limiter's
// timeout, or grantTimeout if longer. Release it after the call.
func (l *Limiter) grantCtx(ctx context.Context) *callCtx {
	c := newCallCtx(ctx, time.Now(), max(l.timeout, grantTimeout))
	c.replies = l.replies
	return c
}

// Grant gives one key of a policy another limit for a while, on every
// instance that shares the store at once ([Limiter.Grant]): Extra units
// more in every rule ("this customer gets 10,000 more today"), or none at
// all (Exempt: "lift this address's limit for an hour"). It ends by
// itself at Until.
type Grant struct {
	// Extra is the units added to the limit of every rule of the policy
	// (of the key's tier, under WithTiers) while the grant lasts: with
	// rules of 1,000 a day and 100 a minute, Extra 10,000 makes them
	// 11,000 a day and 10,100 a minute. Units admitted count as usual,
	// so once the grant ends, what the key used in a window counts
	// against the rules' own limits. 1 to 1,000,000,000,000; under
	// SlidingLog the largest limit plus Extra must stay within 100,000.
	// 0 with Exempt.
	Extra int64
	// Exempt admits every request of the key while the grant lasts,
	// counted nowhere and through a lockout, as a key on the policy's
	// Allow list is.
	Exempt bool
	// Until is when the grant ends: at most 30 days from now. A Grant
	// whose Until is not in the future (the zero Grant) revokes the key's
	// grant.
	Until time.Time
	// By names who granted it (an operator, a ticket system), and Note
	// says why: up to 256 bytes each, for the audit line and whoever
	// looks the key up.
	By, Note string
}

// Grant gives key the grant g until g.Until, replacing the one it holds,
// or revokes its grant when g.Until is not after now (a zero Grant). The
// store keeps the grant and reads it in the same atomic step as it
// decides the key, so it holds at once on every instance that shares the
// store, exactly as the limits do, and it expires by itself; a [Limiter.Peek]
// of the key reports it in [Decision.Grant]. Every instance forgets its
// cached denials of the key. [Limiter.Reset] leaves a grant alone. Each
// grant and revocation is logged by [log/slog]'s default logger on the
// instance that made it, with the policy, key, Extra or Exempt, Until, By
// and Note.
//
// While the store fails, the failure policy decides without the grant
// (FailLocal counts to the rules' own limits). The cost of a request must
// still fit the rules' own limits ([ErrInvalidCost]).
//
// Its store calls take the limiter's timeout, or a second if that is
// longer. Grant returns an error wrapping [ErrInvalidPolicy], and grants
// nothing, for a store that keeps no grants ([driver.Grants]; the
// MemoryStore and the Redis drivers do), a policy with InFlight or
// Shards, a key the policy's Allow or Deny list decides (the error names
// the list), a negative Extra, neither or both of Extra and Exempt, an
// Until more than 30 days away, a By or Note over 256 bytes, or Extra
// beyond what the policy's algorithm keeps. It returns the store's error
// when the store could not keep the grant: a Redis store refuses one
// (wrapping [driver.ErrOlderRelease]) while an instance of a release that
// reads no grants still uses the policy.
func (l *Limiter) Grant(ctx context.Context, key string, g Grant) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ratekit: policy %q: grant: %w", l.policy.Name, err)
	}
	now := l.now()
	revoke := !g.Until.After(now)
	if err := l.checkGrant(key, g, now, revoke); err != nil {
		return err
	}
	dg := driver.Grant{Extra: g.Extra, Exempt: g.Exempt, Until: g.Until, By: g.By, Note: g.Note}
	if revoke {
		dg = driver.Grant{}
	}
	bounded := boundKey(key)
	cc := l.grantCtx(ctx)
	err := l.grants().SetGrant(cc, l.policy.Name, bounded, dg)
	cc.release()
	if err != nil {
		return fmt.Errorf("ratekit: policy %q: grant of %q: %w", l.policy.Name, key, err)
	}
	// The denials cached here may not hold any more (the store tells the
	// other instances).
	if l.deny != nil {
		l.deny.remove(bounded)
	}
	for _, t := range l.tiered {
		if t.deny != nil {
			t.deny.remove(bounded)
		}
	}
	audit(ctx, l.policy.Name, key, g, revoke)
	return nil
}

// grants returns the limiter's store as a [driver.Grants], or nil.
func (l *Limiter) grants() driver.Grants {
	gs, _ := l.store.(driver.Grants)
	return gs
}

// checkGrant validates a Grant of key at now.
func (l *Limiter) checkGrant(key string, g Grant, now time.Time, revoke bool) error {
	p := &l.policy
	bad := func(format string, args ...any) error {
		return fmt.Errorf("ratekit: policy %q: grant of %q: %s: %w", p.Name, key, fmt.Sprintf(format, args...), ErrInvalidPolicy)
	}
	switch {
	case l.grants() == nil:
		return bad("store %T keeps no grants", l.store)
	case p.InFlight > 0:
		return bad("an InFlight policy takes no grants: a concurrency limit is no quota to raise")
	case p.Shards > 1:
		return bad("a policy with Shards takes no grants: its shards decide apart")
	case l.lists != nil && l.lists.deny.Match(key):
		return bad("the key is on the policy's Deny list, which decides it")
	case l.lists != nil && l.lists.allow.Match(key):
		return bad("the key is on the policy's Allow list, which decides it")
	case revoke:
		return nil
	}
	if why := p.grantTerms(g, now); why != "" {
		return bad("%s", why)
	}
	return nil
}

// grantTerms returns what is wrong with the terms of g at now for the
// policy, or "".
func (p *Policy) grantTerms(g Grant, now time.Time) string {
	switch {
	case g.Extra < 0:
		return fmt.Sprintf("Extra %d is negative", g.Extra)
	case g.Exempt && g.Extra != 0, !g.Exempt && g.Extra == 0:
		return fmt.Sprintf("Extra %d with Exempt %v: a grant is Extra units or Exempt", g.Extra, g.Exempt)
	case g.Extra > driver.MaxGrantExtra:
		return fmt.Sprintf("Extra %d is over %d", g.Extra, int64(driver.MaxGrantExtra))
	case g.Until.Sub(now) > driver.MaxGrant:
		return fmt.Sprintf("Until %s is more than 30 days away", g.Until.Format(time.RFC3339))
	case len(g.By) > driver.MaxGrantText || len(g.Note) > driver.MaxGrantText:
		return fmt.Sprintf("By or Note is over %d bytes", driver.MaxGrantText)
	case p.Algorithm == SlidingLog && slidingMax(p.Rules)+g.Extra > maxLogLimit:
		return fmt.Sprintf("Extra %d takes a SlidingLog limit over %d; use SlidingBuckets for quotas this large", g.Extra, maxLogLimit)
	}
	return ""
}

// audit logs a grant or revocation.
func audit(ctx context.Context, policy, key string, g Grant, revoke bool) {
	if revoke {
		slog.InfoContext(ctx, "ratekit: grant revoked", "policy", policy, "key", key, "by", g.By, "note", g.Note)
		return
	}
	slog.InfoContext(ctx, "ratekit: grant", "policy", policy, "key", key, "extra", g.Extra, "exempt", g.Exempt,
		"until", g.Until.UTC().Format(time.RFC3339), "by", g.By, "note", g.Note)
}

// grantOf returns key's live grant (bounded key) for a Peek, or nil when
// it holds none or the store could not say.
func (l *Limiter) grantOf(ctx context.Context, bounded string) *Grant {
	gs := l.grants()
	if gs == nil {
		return nil
	}
	cc := l.grantCtx(ctx)
	g, ok, err := gs.GrantOf(cc, l.policy.Name, bounded)
	cc.release()
	if err != nil || !ok {
		return nil
	}
	return &Grant{Extra: g.Extra, Exempt: g.Exempt, Until: g.Until, By: g.By, Note: g.Note}
}

// lists are a policy's Allow and Deny lists, parsed.
type lists struct {
	allow, deny *netlist.List
}

// parseLists parses the policy's lists; nil when it has none.
func (p *Policy) parseLists() (*lists, error) {
	allow, err := netlist.Parse(p.Allow)
	if err != nil {
		return nil, fmt.Errorf("ratekit: policy %q Allow: %w: %w", p.Name, err, ErrInvalidPolicy)
	}
	deny, err := netlist.Parse(p.Deny)
	if err != nil {
		return nil, fmt.Errorf("ratekit: policy %q Deny: %w: %w", p.Name, err, ErrInvalidPolicy)
	}
	if allow == nil && deny == nil {
		return nil, nil
	}
	return &lists{allow: allow, deny: deny}, nil
}

// listed decides a request of n units of key when the policy's Deny or
// Allow list holds key, into d, and reports whether it did: no store is
// asked, and nothing is recorded. It reports the decision unless it is
// a peek's.
func (l *Limiter) listed(ctx context.Context, key string, n int64, d *Decision, report bool) bool {
	denied := l.lists.deny.Match(key)
	if !denied && !l.lists.allow.Match(key) {
		return false
	}
	rs := d.res.Rules.Prepare(len(l.rules))
	for i, r := range l.rules {
		rs[i] = driver.RuleState{Limit: r.Limit, Window: r.Window, Calendar: r.Calendar}
		if denied {
			rs[i].Used, rs[i].RetryAfter, rs[i].ResetAfter = r.Limit, deniedRetry, deniedRetry
		}
	}
	l.bind(d, !denied, SourceStore)
	d.Listed = true
	if !report {
		return true // a peek
	}
	if denied {
		l.refuse(boundKey(key))
	}
	if l.observer != nil {
		l.emit(ctx, Event{Kind: EventDecision, Key: boundKey(key), Cost: n, Decision: *d})
	}
	return true
}
