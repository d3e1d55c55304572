package memstore

import (
	"math"
	"slices"
	"time"

	"github.com/ratekit/ratekit/core/driver"
)

// A key's sliding log is kept in chunks of memChunkLen events (1.5 KiB),
// so that a growing log never copies its events, nor leaves the arrays it
// outgrew to the garbage collector: each event is written once, where it
// stays until whole chunks have left the window. The first chunk starts
// at 4 events and doubles up to memChunkLen, so that a key of a few units
// holds a few events. memSpareChunks chunks that left the window are kept
// for the events to come.
const (
	memChunkBits   = 6
	memChunkLen    = 1 << memChunkBits
	memSpareChunks = 2
)

// memLog is the window of one key: events sorted by time, each holding the
// units admitted at that microsecond (driver.SlidingLog), or bucket counts per
// bucket width (driver.SlidingBuckets).
//
// What a sliding-log decision reads and writes comes first, in two cache
// lines: the first holds what finds the key (key, next) and every field
// that a decision writes, the second what it reads of the window, which
// changes only when the window's start moves; so that the decisions of
// a hot key from several cores move one line of it between them, not
// two. The newest event's time and running total are kept as well (last,
// lastCum), so that a decision reads no event at all while the first
// rule's window starts at the same event. The struct's size, 192 bytes
// (TestMemLayout), is a size class of the allocator that keeps its
// objects on cache-line boundaries. Event indexes are int32: a log holds
// at most a few times the 100,000 units a rule keeps.
type memLog struct {
	key  string
	n    int32
	head int32
	used int64 // µs; last decision
	// last, lastN and lastCum are event n-1's time, units and running
	// total, when the log has a live event (n > head). They are that
	// event's own: the event in its chunk has its time, but its units
	// and running total are written there only when another event is
	// pushed, or before the events are read (flush), so that decisions
	// in one microsecond, a hot key's, write none of the chunk's lines.
	last, lastN, lastCum int64
	expires              int64 // µs; the key holds nothing live after

	// ev holds the driver.SlidingLog's events in chunks (see memChunkLen): event
	// i is ev[i>>memChunkBits][i&(memChunkLen-1)], read by event(i); the
	// events are [0, n), the live ones [head, n). Every chunk is
	// memChunkLen long but the first while it is the only one.
	ev  [][]memEvent
	cur [inlineRules]int32 // per rule, where its window started last time
	// The first rule's window start, cur[0], as start last found it:
	// event cur[0]'s time (startAt) and running total before it
	// (startBase), and event cur[0]-1's time, or math.MinInt64 when
	// cur[0] was the head (startPrev); so that while the window starts
	// at the same event, a decision reads no event at all (see
	// startOf). startAt is math.MinInt64 when they are not known.
	startAt, startBase, startPrev int64

	next     *memLog  // the next key of the same hash
	index    int32    // in memShard.keys
	offences int32    // lockouts so far (driver.Lockout.Max)
	born     int64    // µs; no decision before it is refunded
	lock     int64    // µs; the key is locked out until then
	lockKeep int64    // µs; its offences are remembered until then
	pass     int64    // µs; the key passed a challenge until then
	x        *memMore // driver.SlidingBuckets and calendar rules; nil until used
	_        [8]byte  // to 192 bytes
}

// memMore is what a key holds for driver.SlidingBuckets and calendar rules,
// apart from its window so that a sliding-log window stays small.
type memMore struct {
	bk  []memBuckets // driver.SlidingBuckets
	cal []memPeriod  // calendar rules: the units of each period
}

// more returns lg.x, made on first use.
func (lg *memLog) more() *memMore {
	if lg.x == nil {
		lg.x = new(memMore)
	}
	return lg.x
}

// memPeriod is the units admitted in one calendar period [start, end).
type memPeriod struct{ start, end, n int64 }

// memEvent is the units admitted at one microsecond (sliding log) or in
// one bucket (sliding buckets). cum, kept by the sliding log only, is the
// running total of units up to and including this event, so a window's
// count and a RetryAfter are binary searches, not sums over the window.
type memEvent struct{ at, n, cum int64 }

// decideLog is decide for driver.SlidingLog; sh.mu is held. gate, when set, is
// asked with the rule states before a take records units that fit every
// rule; when it says so, the request is challenged (st.Challenged) and
// nothing is recorded.
func (p *Policy) decideLog(sh *memShard, h uint64, lg *memLog, q *driver.Query, take bool, now, maxW int64, st *driver.Result, gate challengeGate) bool {
	rs := prepare(st, len(q.Rules))
	var allowed bool
	if lg == nil {
		allowed = evaluate(nil, q.Rules, q.N, now, rs)
	} else {
		// Written only when they change, here and below: the decisions
		// of a hot key in one microsecond leave the line of lg's fields
		// shared between the cores that take turns at its lock.
		if lg.used != now {
			lg.used = now
		}
		allowed = lg.evaluate(q.Rules, q.N, now, maxW, rs)
	}
	st.Challenged = allowed && gate.reaches(rs)
	if take && allowed && !st.Challenged {
		if lg == nil {
			lg = p.insert(sh, h, q.Key, now)
		}
		lg.add(now, q.N)
		if e := now + maxW; e > lg.expires {
			lg.expires = e
		}
		for i := range rs {
			if q.Rules[i].Calendar != 0 {
				continue // decideMore counts it
			}
			rs[i].Used += q.N
			rs[i].ResetAfter = time.Duration(q.Rules[i].Window.Microseconds()) * time.Microsecond
			if rs[i].NextAfter == 0 {
				rs[i].NextAfter = rs[i].ResetAfter
			}
		}
	}
	return allowed
}

// evaluate is the package's evaluate on the key's events, finding each
// window's start from where it was last time: a few steps forward at
// most, where a search from scratch would wander over events written a
// whole window ago. Events out of the longest window are dropped in whole
// chunks (see compact).
func (lg *memLog) evaluate(rules []driver.Rule, n, now, maxW int64, states []driver.RuleState) bool {
	head, end := int(lg.head), int(lg.n)
	allowed := true
	var newest, total int64
	if end > head {
		newest, total = lg.last, lg.lastCum
	}
	oldest := end // the start of the longest window
	for i, r := range rules {
		if r.Calendar != 0 {
			continue // decideMore counts it
		}
		w := r.Window.Microseconds()
		c, base, first := lg.startOf(i, now-w)
		oldest = min(oldest, c)
		var used int64
		if c < end {
			used = total - base
		}
		// Written in place, field by field (see Limiter.decided in core:
		// a copy of a composite literal stalls on its own stores).
		st := &states[i]
		*st = driver.RuleState{}
		st.Limit, st.Window, st.Used = r.Limit, r.Window, used
		if used > 0 {
			st.ResetAfter = time.Duration(newest+w-now) * time.Microsecond
			st.NextAfter = time.Duration(first+w-now) * time.Microsecond
		}
		if need := used + n - r.Limit; need > 0 {
			allowed = false
			lg.flush()
			// The first event by which need units of the window have left.
			if j := lg.reaching(c, end, base+need); j < end {
				st.RetryAfter = time.Duration(lg.event(j).at+w-now) * time.Microsecond
			}
		}
	}
	if oldest > head {
		lg.head = int32(oldest)
		lg.compact()
	}
	return allowed
}

// event returns event i of the log.
func (lg *memLog) event(i int) *memEvent {
	return &lg.ev[i>>memChunkBits][i&(memChunkLen-1)]
}

// after returns the index of the first event of [lo, hi) after t, or hi.
func (lg *memLog) after(lo, hi int, t int64) int {
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if lg.event(m).at <= t {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// reaching returns the index of the first event of [lo, hi) whose running
// total reaches c, or hi.
func (lg *memLog) reaching(lo, hi int, c int64) int {
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if lg.event(m).cum < c {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// find finds the live event at time at.
func (lg *memLog) find(at int64) (int, bool) {
	i := lg.after(int(lg.head), int(lg.n), at-1)
	return i, i < int(lg.n) && lg.event(i).at == at
}

// startOf returns the index of the first event after cutoff, starting
// from rule i's hint, with the running total before it and its time when
// there is one: for the first rule, from the log's own fields while the
// window starts at the same event.
func (lg *memLog) startOf(i int, cutoff int64) (c int, base, first int64) {
	if i == 0 {
		if c := int(lg.cur[0]); lg.startPrev <= cutoff && cutoff < lg.startAt && lg.holds(c) {
			return c, lg.startBase, lg.startAt
		}
	}
	// No flush: start reads events' times, which are in their chunks,
	// and the newest event's units are the log's own (lastN), so that
	// a decision reads no chunk line that only its push would write.
	// When the first rule's window moved past the event where it started
	// (at startAt), that event is out: the walk starts after it, without
	// reading it again.
	c0, was := int(lg.cur[0]), lg.startAt
	after := i == 0 && was != math.MinInt64 && was <= cutoff && lg.holds(c0)
	c = lg.start(i, cutoff, after)
	n := int(lg.n)
	switch {
	case c == n-1:
		base, first = lg.lastCum-lg.lastN, lg.last
	case c < n:
		e := lg.event(c)
		base, first = e.cum-e.n, e.at
	}
	if i == 0 {
		lg.remember(c, base, first, after && c == c0+1, was)
	}
	return c, base, first
}

// holds reports whether event c is in the log.
func (lg *memLog) holds(c int) bool { return c >= int(lg.head) && c < int(lg.n) }

// remember keeps where the first rule's window starts, event c (base and
// first its units before it and its time), for the next decision, with
// the time of the event before it: was when the window moved one event
// on (next), else read from the log.
func (lg *memLog) remember(c int, base, first int64, next bool, was int64) {
	lg.startAt, lg.startBase, lg.startPrev = first, base, math.MinInt64
	switch {
	case c == int(lg.n):
		lg.startAt = math.MinInt64
	case next:
		lg.startPrev = was // the time of the event before c
	case c > int(lg.head):
		lg.startPrev = lg.event(c - 1).at
	}
}

// start returns the index of the first event after cutoff, starting from
// rule i's hint; after the hint's event when after is set, the caller
// knowing that event to be at or before cutoff.
func (lg *memLog) start(i int, cutoff int64, after bool) int {
	head, n := int(lg.head), int(lg.n)
	c := head
	if i < len(lg.cur) && int(lg.cur[i]) > c && int(lg.cur[i]) <= n {
		c = int(lg.cur[i])
	}
	switch {
	case after:
		c = int(lg.cur[i]) + 1
		fallthrough
	case c == head || lg.event(c-1).at <= cutoff:
		for steps := 0; c < n && lg.event(c).at <= cutoff; steps++ {
			if steps == 8 {
				c = lg.after(c, n, cutoff)
				break
			}
			c++
		}
	default:
		// The hint is past the window's start (the clock stepped back).
		c = lg.after(head, c, cutoff)
	}
	if i < len(lg.cur) && int(lg.cur[i]) != c {
		lg.cur[i] = int32(c)
	}
	return c
}

// compact drops the chunks whose events are all dead once they are a
// quarter of the chunks or more (so that moving the chunks costs O(1) per
// chunk), keeping up to memSpareChunks of them for the events to come; a
// log with nothing live keeps its first chunk only.
func (lg *memLog) compact() {
	if lg.head == lg.n {
		if len(lg.ev) > 1 {
			clear(lg.ev[1:])
			lg.ev = lg.ev[:1]
		}
		lg.n, lg.head = 0, 0
		lg.cur = [inlineRules]int32{}
		lg.startAt = math.MinInt64
		return
	}
	k := int(lg.head) >> memChunkBits
	if k == 0 || k*4 < len(lg.ev) {
		return
	}
	// Rotate the k dead chunks (each full, memChunkLen long) to the end.
	ev := lg.ev
	slices.Reverse(ev[:k])
	slices.Reverse(ev[k:])
	slices.Reverse(ev)
	d := int32(k << memChunkBits)
	lg.n -= d
	lg.head -= d
	if lg.cur[0] < d {
		lg.startAt = math.MinInt64 // its event was dropped
	}
	for i := range lg.cur {
		lg.cur[i] = max(0, lg.cur[i]-d)
	}
	if keep := (int(lg.n)+memChunkLen-1)>>memChunkBits + memSpareChunks; len(ev) > keep {
		clear(ev[keep:])
		lg.ev = ev[:keep]
	}
}

// flush writes the newest event's units and running total to its chunk
// (see memLog.lastN), for the events to be read; only when they changed,
// so that the denials of a hot key, which read the events, leave the
// chunk's lines shared between the cores.
func (lg *memLog) flush() {
	if lg.n > lg.head {
		if e := lg.event(int(lg.n) - 1); e.cum != lg.lastCum || e.n != lg.lastN {
			e.n, e.cum = lg.lastN, lg.lastCum
		}
	}
}

// push appends e to the log, writing the newest event's units and
// running total to its chunk first (as flush does, but without reading
// them: its line is written anyway, the new event's being the same or
// the next, and a write that misses the cache does not hold the
// decision up as a read does).
func (lg *memLog) push(e memEvent) {
	if lg.n > lg.head {
		p := lg.event(int(lg.n) - 1)
		p.n, p.cum = lg.lastN, lg.lastCum
	}
	i := int(lg.n)
	k, o := i>>memChunkBits, i&(memChunkLen-1)
	switch {
	case k == len(lg.ev):
		size := memChunkLen
		if k == 0 {
			size = 4 // a key's first events
		}
		lg.ev = append(lg.ev, make([]memEvent, size))
	case o == len(lg.ev[k]):
		// The first chunk, the only one, is full: double it.
		lg.ev[k] = append(lg.ev[k], make([]memEvent, o)...)
	}
	lg.ev[k][o] = e
	lg.n++
	lg.last, lg.lastN, lg.lastCum = e.at, e.n, e.cum
}

// evaluate fills states for ev at time now and reports whether n more
// units fit every rule. It costs O(rules × log(events)).
func evaluate(ev []memEvent, rules []driver.Rule, n, now int64, states []driver.RuleState) bool {
	allowed := true
	var newest, total int64
	if len(ev) > 0 {
		newest, total = ev[len(ev)-1].at, ev[len(ev)-1].cum
	}
	for i, r := range rules {
		if r.Calendar != 0 {
			continue // decideMore counts it
		}
		w := r.Window.Microseconds()
		idx := after(ev, now-w)
		var used, base int64
		if idx < len(ev) {
			base = ev[idx].cum - ev[idx].n
			used = total - base
		}
		st := driver.RuleState{Limit: r.Limit, Window: r.Window, Used: used}
		if used > 0 {
			st.ResetAfter = time.Duration(newest+w-now) * time.Microsecond
			st.NextAfter = time.Duration(ev[idx].at+w-now) * time.Microsecond
		}
		if need := used + n - r.Limit; need > 0 {
			allowed = false
			// The first event by which need units of the window have left.
			j := idx + reaching(ev[idx:], base+need)
			if j < len(ev) {
				st.RetryAfter = time.Duration(ev[j].at+w-now) * time.Microsecond
			}
		}
		states[i] = st
	}
	return allowed
}

// after returns the index of the first event after t.
func after(ev []memEvent, t int64) int {
	lo, hi := 0, len(ev)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if ev[m].at <= t {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// reaching returns the index of the first event whose running total
// reaches c.
func reaching(ev []memEvent, c int64) int {
	lo, hi := 0, len(ev)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if ev[m].cum < c {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// add records n units at time at, keeping events sorted and merged.
func (lg *memLog) add(at, n int64) {
	l := int(lg.n)
	if l == int(lg.head) {
		lg.push(memEvent{at: at, n: n, cum: n})
		return
	}
	switch {
	case lg.last < at:
		lg.push(memEvent{at: at, n: n, cum: lg.lastCum + n})
		return
	case lg.last == at:
		lg.lastN += n
		lg.lastCum += n
		return
	}
	lg.flush()
	// An injected clock stepped back: insert in order, then fix the
	// running totals after the insertion point.
	i, found := lg.find(at)
	if found {
		lg.event(i).n += n
	} else {
		lg.push(memEvent{})
		for j := int(lg.n) - 1; j > i; j-- {
			*lg.event(j) = *lg.event(j - 1)
		}
		*lg.event(i) = memEvent{at: at, n: n}
		lg.cur = [inlineRules]int32{}
	}
	lg.recount(i)
}

// recount recomputes the running totals from event i on, the newest
// event being in its chunk (flush); the first rule's window start is
// found afresh next time.
func (lg *memLog) recount(i int) {
	lg.startAt = math.MinInt64
	// Only differences of totals are read, so any base will do.
	var cum int64
	if i > int(lg.head) {
		cum = lg.event(i - 1).cum
	}
	for j := i; j < int(lg.n); j++ {
		e := lg.event(j)
		cum += e.n
		e.cum = cum
	}
	if lg.n > lg.head {
		e := lg.event(int(lg.n) - 1)
		lg.last, lg.lastN, lg.lastCum = e.at, e.n, e.cum
	}
}
