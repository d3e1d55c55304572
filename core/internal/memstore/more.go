package memstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/ratekit/ratekit/core/driver"
)

// decideMore is decide for a policy with calendar rules, a lockout or a
// challenge; sh.mu is held. A key locked out, a calendar rule without
// room, or a request challenged leaves the sliding rules peeked at; a
// take that every rule admits is counted in the calendar periods too; a
// take that a rule denies starts a lockout (a challenged one does not).
func (p *Policy) decideMore(sh *memShard, h uint64, lg *memLog, q *driver.Query, take bool, now, maxW int64, st *driver.Result) bool {
	lock := lg.lockLeft(now)
	// The calendar rules' states, kept aside: the sliding decision
	// prepares st afresh. A valid policy has at most one rule per period.
	var calBuf [3]driver.RuleState
	var endBuf [3]int64
	cal, ends, sliding, fits := lg.periods(q, now, calBuf[:0], endBuf[:0])
	open := lock == 0 && fits
	var gate challengeGate
	if open && hasChallenge(q.Rules) && !lg.passed(now) {
		gate = challengeGate{q: q, cal: cal} // no pass: what fits may reach a threshold
	}
	allowed := p.decideSliding(sh, h, lg, q, take && open, sliding, now, maxW, st, gate)
	challenged := st.Challenged
	allowed = allowed && open && !challenged
	// An admission counts in its calendar periods; a denial that no lock
	// or challenge made starts a lockout.
	if take && (allowed && len(cal) > 0 || !allowed && !challenged && lock == 0 && q.Lockout.For > 0) {
		lock = p.record(sh, h, q, now, allowed, cal, ends, lock)
	}
	putCalendar(st, q, cal)
	st.LockedFor = time.Duration(lock) * time.Microsecond
	st.Challenged = challenged
	return allowed
}

// lockLeft returns how long lg's key stays locked out after now, in µs:
// 0 for none (or a key the store holds nothing of, lg nil).
func (lg *memLog) lockLeft(now int64) int64 {
	if lg == nil || lg.lock <= now {
		return 0
	}
	return lg.lock - now
}

// passed reports whether lg's key holds a pass of a challenge at now.
func (lg *memLog) passed(now int64) bool { return lg != nil && lg.pass > now }

// putCalendar puts the states of q's calendar rules, cal in their order,
// in st's rule states.
func putCalendar(st *driver.Result, q *driver.Query, cal []driver.RuleState) {
	rs := st.Rules.All()
	nc := 0
	for i, r := range q.Rules {
		if r.Calendar != 0 {
			rs[i] = cal[nc]
			nc++
		}
	}
}

// decideSliding decides q's sliding rules (none: sliding false) into st,
// taking when take says so, and reports whether they admit it.
func (p *Policy) decideSliding(sh *memShard, h uint64, lg *memLog, q *driver.Query, take, sliding bool, now, maxW int64, st *driver.Result, gate challengeGate) bool {
	switch {
	case !sliding:
		prepare(st, len(q.Rules))
		st.Challenged = gate.reaches(nil)
		return true
	case q.Algorithm == driver.SlidingBuckets:
		return p.decideBuckets(sh, h, lg, q, take, now, maxW, st, gate)
	}
	return p.decideLog(sh, h, lg, q, take, now, maxW, st, gate)
}

// record writes what a decision of q leaves in the key's record: an
// admission's units in its calendar periods (cal, whose Used it updates,
// ending at ends), or a denial's lockout, whose length it returns (lock
// otherwise).
func (p *Policy) record(sh *memShard, h uint64, q *driver.Query, now int64, allowed bool, cal []driver.RuleState, ends []int64, lock int64) int64 {
	lg := sh.get(h, q.Key)
	if lg == nil {
		lg = p.insert(sh, h, q.Key, now)
	}
	if !allowed {
		lock = lg.lockout(q.Lockout, now)
		lg.expires = max(lg.expires, lg.lockKeep)
		return lock
	}
	for i := range cal {
		lg.periodAdd(cal[i].Used, now, ends[i], cal[i].Window, q.N)
		cal[i].Used += q.N
		lg.expires = max(lg.expires, ends[i])
	}
	return lock
}

// challengeGate decides whether a request that fits every rule of q is
// challenged: a key without a pass, whose calendar rules' states are cal.
// The zero gate (a policy without a Challenge, or a key that passed)
// challenges nothing.
type challengeGate struct {
	q   *driver.Query
	cal []driver.RuleState
}

// reaches reports whether q.N more units would bring a rule with a
// Challenge to it, given the sliding rules' states rs (nil when the
// policy has none) and the calendar rules' in g.cal.
func (g challengeGate) reaches(rs []driver.RuleState) bool {
	if g.q == nil {
		return false
	}
	nc := 0
	for i, r := range g.q.Rules {
		var used int64
		if r.Calendar != 0 {
			used = g.cal[nc].Used
			nc++
		} else {
			used = rs[i].Used
		}
		if r.Challenge > 0 && used+g.q.N >= r.Challenge {
			return true
		}
	}
	return false
}

// Pass implements [driver.Challenges].
func (s *Store) Pass(ctx context.Context, q driver.Query) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory store: %w", err)
	}
	if err := driver.CheckRules(q.Rules); err != nil {
		return fmt.Errorf("memory store: %w", err)
	}
	s.policy(q.Policy).Pass(&q)
	return nil
}

// Pass records that q.Key passed a challenge at q.Now, or at the store's
// time (see [driver.Challenges]).
func (p *Policy) Pass(q *driver.Query) {
	now := q.Now
	if now == 0 {
		now = p.store.now()
	}
	sh, h := p.shard(q.Key)
	sh.mu.Lock()
	lg := sh.get(h, q.Key)
	if q.Now == 0 && lg != nil && lg.used > now {
		now = lg.used // keep the key's times in order (see decide)
	}
	if q.Now == 0 && lg == nil && now <= sh.forgot {
		now = sh.forgot + 1 // see decide
	}
	if lg == nil {
		lg = p.insert(sh, h, q.Key, now)
	}
	lg.used = max(lg.used, now)
	lg.pass = max(lg.pass, passUntil(q.Rules, now))
	lg.expires = max(lg.expires, lg.pass)
	sh.sweep(now)
	sh.mu.Unlock()
	p.store.shed(now)
}

// periods returns the states of q's calendar rules at now, appended to
// cal, with the ends of their periods appended to ends; whether q has
// sliding rules; and whether q.N more units fit every calendar rule. lg
// may be nil.
func (lg *memLog) periods(q *driver.Query, now int64, cal []driver.RuleState, ends []int64) (_ []driver.RuleState, _ []int64, sliding, fits bool) {
	fits = true
	for _, r := range q.Rules {
		if r.Calendar == 0 {
			sliding = true
			continue
		}
		start, end := r.PeriodMicros(now)
		used := lg.periodUsed(start, end)
		s := driver.RuleState{Limit: r.Limit, Window: time.Duration(end-start) * time.Microsecond, Calendar: r.Calendar,
			Used: used, ResetAfter: time.Duration(end-now) * time.Microsecond}
		s.NextAfter = s.ResetAfter
		if used+q.N > r.Limit {
			fits = false
			s.RetryAfter = s.ResetAfter
		}
		cal, ends = append(cal, s), append(ends, end)
	}
	return cal, ends, sliding, fits
}

// periodUsed returns the units lg holds in the period [start, end); lg
// may be nil.
func (lg *memLog) periodUsed(start, end int64) int64 {
	if lg == nil || lg.x == nil {
		return 0
	}
	for _, c := range lg.x.cal {
		if c.start == start && c.end == end {
			return c.n
		}
	}
	return 0
}

// periodAdd adds n units to the period of length w ending at end, which
// held used; periods that have ended are dropped when a new one begins.
func (lg *memLog) periodAdd(used, now, end int64, w time.Duration, n int64) {
	start := end - w.Microseconds()
	x := lg.more()
	if used > 0 {
		for i := range x.cal {
			if c := &x.cal[i]; c.start == start && c.end == end {
				c.n += n
				return
			}
		}
	}
	x.cal = slices.DeleteFunc(x.cal, func(c memPeriod) bool { return c.end <= now || c.start == start && c.end == end })
	x.cal = append(x.cal, memPeriod{start: start, end: end, n: n})
}

// refundPeriods gives q.N units back to the calendar periods that held
// time at.
func (lg *memLog) refundPeriods(q *driver.Query, at int64) {
	for _, r := range q.Rules {
		if r.Calendar == 0 {
			continue
		}
		if lg.x == nil {
			return
		}
		start, end := r.PeriodMicros(at)
		for i := range lg.x.cal {
			if c := &lg.x.cal[i]; c.start == start && c.end == end {
				c.n -= min(q.N, c.n)
				break
			}
		}
	}
}

// lockout locks lg out from now under lo and returns for how long, in µs.
func (lg *memLog) lockout(lo driver.Lockout, now int64) int64 {
	if lg.lockKeep <= now {
		lg.offences = 0 // forgotten
	}
	d := lockoutFor(lo, int64(lg.offences))
	lg.offences = min(lg.offences+1, maxOffences)
	lg.lock = now + d
	lg.lockKeep = lg.lock
	if lo.Max > lo.For {
		lg.lockKeep += lo.Max.Microseconds()
	}
	return d
}

// maxOffences bounds the offence count a lockout keeps: past it the
// lockout has long reached driver.Lockout.Max.
const maxOffences = 62

// lockoutFor returns, in µs, how long a lockout after offences earlier
// ones lasts: For, doubled per earlier offence up to Max when Max is
// above For.
func lockoutFor(lo driver.Lockout, offences int64) int64 {
	d, m := lo.For.Microseconds(), lo.Max.Microseconds()
	if m <= d {
		return d
	}
	for range offences {
		if d >= m/2 {
			return m
		}
		d *= 2
	}
	return d
}

// passUntil returns, in µs, when a challenge passed at now (µs) ends
// under rules: once the longest window of the rules with a Challenge has
// passed, or the current period of such a calendar rule has ended,
// whichever is later; now itself when no rule has a Challenge.
func passUntil(rules []driver.Rule, now int64) int64 {
	until := now
	for _, r := range rules {
		switch {
		case r.Challenge <= 0:
		case r.Calendar != 0:
			_, end := r.PeriodMicros(now)
			until = max(until, end)
		default:
			until = max(until, now+r.Window.Microseconds())
		}
	}
	return until
}
