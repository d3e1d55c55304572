package memstore

import (
	"slices"
	"time"

	"github.com/ratekit/ratekit/core/driver"
)

// memBuckets is the buckets of one width, sorted by index.
type memBuckets struct {
	width int64
	b     []memEvent
}

// decideBuckets is decide for driver.SlidingBuckets: each rule's window is split
// into buckets of width g, kept per width so that rules of one width (and
// tiers of one window) share them; the bucket holding the window's start
// is counted in full, so the count never falls short of the true sliding
// count. sh.mu is held.
func (p *Policy) decideBuckets(sh *memShard, h uint64, lg *memLog, q *driver.Query, take bool, now, maxW int64, st *driver.Result, gate challengeGate) bool {
	rs := prepare(st, len(q.Rules))
	var scratch memLog
	view := lg
	if view == nil {
		view = &scratch
	} else {
		view.used = now
	}
	allowed := true
	var maxG int64
	for i, r := range q.Rules {
		if r.Calendar != 0 {
			continue // decideMore counts it
		}
		g := q.BucketWidth(r)
		maxG = max(maxG, g)
		rs[i] = bucketState(view.liveBuckets(q, g, now), r, g, q.N, now)
		if rs[i].RetryAfter > 0 {
			allowed = false
		}
	}
	st.Challenged = allowed && gate.reaches(rs)
	if take && allowed && !st.Challenged {
		if lg == nil {
			lg = p.insert(sh, h, q.Key, now)
		}
		addBuckets(lg, q, rs, now)
		lg.expires = max(lg.expires, now+maxW+maxG)
	}
	return allowed
}

// liveBuckets returns lg's buckets of width g, once it has dropped those
// older than every window of this width.
func (lg *memLog) liveBuckets(q *driver.Query, g, now int64) []memEvent {
	bs := lg.bucketsOf(g, false)
	if bs == nil {
		return nil
	}
	lo := (now - longestOfWidth(q, g)) / g
	b := bs.b
	k := 0
	for k < len(b) && b[k].at < lo {
		k++
	}
	if k > 0 {
		b = append(b[:0], b[k:]...)
		bs.b = b
	}
	return b
}

// addBuckets records an admission of q's units in lg's buckets of every
// width its sliding rules count in, and updates their states rs.
func addBuckets(lg *memLog, q *driver.Query, rs []driver.RuleState, now int64) {
	for i, r := range q.Rules {
		if r.Calendar != 0 {
			continue
		}
		g := q.BucketWidth(r)
		if !sharesWidth(q, i, g) {
			bs := lg.bucketsOf(g, true)
			bs.b = bucketAdd(bs.b, now/g, q.N)
		}
		rs[i].Used += q.N
		rs[i].ResetAfter = time.Duration((now/g+1)*g+r.Window.Microseconds()-now) * time.Microsecond
		if rs[i].NextAfter == 0 {
			rs[i].NextAfter = rs[i].ResetAfter
		}
	}
}

// sharesWidth reports whether a rule before rule i has bucket width g, so
// that its buckets were already counted.
func sharesWidth(q *driver.Query, i int, g int64) bool {
	for _, r := range q.Rules[:i] {
		if r.Calendar == 0 && q.BucketWidth(r) == g {
			return true
		}
	}
	return false
}

// longestOfWidth returns the longest window of the rules of q whose
// buckets are g wide.
func longestOfWidth(q *driver.Query, g int64) int64 {
	var w int64
	for _, r := range q.Rules {
		if r.Calendar == 0 && q.BucketWidth(r) == g {
			w = max(w, r.Window.Microseconds())
		}
	}
	return w
}

// bucketsOf returns the buckets of width g, adding them when add is set;
// nil when there are none.
func (lg *memLog) bucketsOf(g int64, add bool) *memBuckets {
	if lg.x != nil {
		for j := range lg.x.bk {
			if lg.x.bk[j].width == g {
				return &lg.x.bk[j]
			}
		}
	}
	if !add {
		return nil
	}
	x := lg.more()
	x.bk = append(x.bk, memBuckets{width: g})
	return &x.bk[len(x.bk)-1]
}

// bucketState computes a rule's state over its live buckets bk (sorted by
// index, width g) for n more units at now.
func bucketState(bk []memEvent, r driver.Rule, g, n, now int64) driver.RuleState {
	w := r.Window.Microseconds()
	lo := (now - w) / g
	st := driver.RuleState{Limit: r.Limit, Window: r.Window}
	k := 0
	for k < len(bk) && bk[k].at < lo {
		k++
	}
	bk = bk[k:]
	for _, b := range bk {
		st.Used += b.n
	}
	if len(bk) > 0 {
		st.ResetAfter = time.Duration((bk[len(bk)-1].at+1)*g+w-now) * time.Microsecond
		st.NextAfter = time.Duration((bk[0].at+1)*g+w-now) * time.Microsecond
	}
	if need := st.Used + n - r.Limit; need > 0 {
		var acc int64
		for _, b := range bk {
			acc += b.n
			if acc >= need {
				// Bucket b stops counting once the window starts after it.
				st.RetryAfter = time.Duration((b.at+1)*g+w-now) * time.Microsecond
				break
			}
		}
	}
	return st
}

// bucketAdd adds n (possibly negative) units to bucket idx, dropping
// buckets that fall to zero.
func bucketAdd(bk []memEvent, idx, n int64) []memEvent {
	i, found := findAt(bk, idx)
	if !found {
		if n <= 0 {
			return bk
		}
		return slices.Insert(bk, i, memEvent{at: idx, n: n})
	}
	bk[i].n += n
	if bk[i].n <= 0 {
		bk = slices.Delete(bk, i, i+1)
	}
	return bk
}

// findAt finds the event at time (or bucket index) at in ev, sorted by at.
func findAt(ev []memEvent, at int64) (int, bool) {
	return slices.BinarySearchFunc(ev, at, func(e memEvent, t int64) int {
		switch {
		case e.at < t:
			return -1
		case e.at > t:
			return 1
		}
		return 0
	})
}
