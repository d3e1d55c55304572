package redislib

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekit/ratekit/core/driver"
)

// Operations of a call.
const (
	OpPeek   byte = 0 // what a take would see; for leases, the units held
	OpTake   byte = 1 // admit units; for leases, take one
	OpRefund byte = 2 // give units back; for leases, release one
	OpRenew  byte = 3 // leases only: extend one still held
	OpPass   byte = 4 // challenges only: record that the key passed one
	OpRecord byte = 5 // record units admitted without the store, at some µs before now

	// opMore is added to the op of a decision that carries a lockout,
	// calendar rules or challenges (see redis.lua).
	opMore = 8
	// opFormat times the format to write is added to the op of a
	// decision (see redis.lua).
	opFormat = 16
)

// Kind says which script decides a call.
type Kind uint8

// The kinds of calls.
const (
	KindLog     Kind = iota // the sliding log, in the library
	KindBuckets             // the sliding buckets, in the library
	KindLease               // leases, a script of their own
)

// Function returns the library function that decides calls of kind, as
// FCALL takes it, and the same as a script; leases have a script only.
func Function(kind Kind) (fn string, script Script) {
	switch kind {
	case KindBuckets:
		return bucketsFn, bktScript
	case KindLease:
		return "", leaseScrpt
	}
	return logFn, logScript
}

// maxRules is the most rules a policy has.
const maxRules = 16

// Call is one store operation on its way to Redis and back. Calls are
// pooled (Get, Put); a call whose caller gave up (its context ended
// first) is never put back, since a flight may still write to it.
type Call struct {
	Op   byte
	Kind Kind
	Key  string // the Redis key
	Slot int    // the key's cluster slot; 0 on a single node

	n, cap, now, at int64
	span            int64   // µs: the longest window of every instance (FleetPolicy.Window)
	format          int     // the format to write (FleetPolicy.Format)
	widths          []int64 // SlidingBuckets: every width the fleet counts in (FleetPolicy.Widths), shared
	rules           []driver.Rule
	bw              [maxRules]int64 // SlidingBuckets: bucket width per rule, µs
	lease           driver.Lease
	more            bool           // a lockout, calendar rules or challenges (see redis.lua)
	lock            driver.Lockout // the policy's lockout
	cal             int64          // calendar rules' periods are found around this time, µs
	refund          bool           // publishes its key when it frees units

	// The answer.
	Allowed    bool
	Challenged bool  // a challenge (driver.Result.Challenged)
	When       int64 // the time of the decision (of the units, for a take)
	Used       int64 // leases: the units held after a take or peek
	Rules      driver.RuleStates
	LockedFor  time.Duration
	Extra      int64 // a grant's extra units (driver.Result.Extra)
	Exempt     bool  // a grant exempts the key (driver.Result.Exempt)
	Err        error

	// Done receives once when the answer is in.
	Done chan struct{}
	// Deadline is the latest the caller waits; zero: no bound.
	Deadline time.Time
	gaveUp   atomic.Bool // the caller stopped waiting: the call is not sent
	replied  atomic.Bool // Redis's reply is in: the answer is being decoded

	// The memory of the call this call leads (the first call of its
	// flight or group), kept from one use to the next so that a decision
	// allocates none of it.
	Args []any
	Blob Blob
	One  [1]*Call // the call, as a flight of one
}

var callPool = sync.Pool{New: func() any { return &Call{Done: make(chan struct{}, 1)} }}

// Get returns a call from the pool.
func Get() *Call { return callPool.Get().(*Call) }

// maxKeptBlob bounds the packed arguments a pooled call keeps.
const maxKeptBlob = 4096

// Put returns a call whose caller has received the answer.
func Put(c *Call) {
	done, args, b := c.Done, c.Args, c.Blob.b
	clear(args)
	if cap(b) > maxKeptBlob {
		b = nil
	}
	*c = Call{Done: done, Args: args[:0], Blob: Blob{b[:0]}}
	callPool.Put(c)
}

// Blob is the packed arguments of a call. go-redis writes it through
// MarshalBinary, so that a pointer to a pooled one is an argument that
// costs no allocation.
type Blob struct{ b []byte }

// MarshalBinary returns the packed arguments.
func (b *Blob) MarshalBinary() ([]byte, error) { return b.b, nil }

// Bytes returns the packed arguments.
func (b *Blob) Bytes() []byte { return b.b }

// Drop forgets the memory of the packed arguments, for a client that may
// still read it after its call returned (a command given up while it
// waited in the client's queue): the next Encode allocates anew.
func (b *Blob) Drop() { b.b = nil }

// Decision sets c up to decide q (a peek, take or refund of the units
// taken at store time at; for a record, the units admitted at µs before
// the decision's time) on the keys of prefix. wall is this process's
// clock in µs, around which calendar periods are found when the server's
// clock decides. cluster says whether slots matter. fleet is what the
// driver last read of the policy's fleet, nil when the policy was not
// joined: the key then keeps what q needs and is written in the first
// format.
func (c *Call) Decision(prefix string, q *driver.Query, op byte, at, wall int64, cluster bool, fleet *FleetPolicy) error {
	if q.Algorithm != driver.SlidingLog && q.Algorithm != driver.SlidingBuckets {
		return fmt.Errorf("algorithm %v: %w", q.Algorithm, driver.ErrInvalidQuery)
	}
	if len(q.Rules) > maxRules {
		return fmt.Errorf("%d rules, at most %d: %w", len(q.Rules), maxRules, driver.ErrInvalidQuery)
	}
	c.Op, c.n, c.now, c.at, c.rules = op, q.N, q.Now, at, q.Rules
	c.Key, c.Kind = Key(prefix, q.Policy, q.Key), KindLog
	if q.Algorithm == driver.SlidingBuckets {
		c.Key, c.Kind = c.Key+BucketsSuffix, KindBuckets
	}
	c.cap, c.span, c.format, c.widths = q.Keep, 0, FormatFirst, nil
	if fleet != nil {
		c.cap, c.span, c.format = max(q.Keep, fleet.Keep()), fleet.Window(), fleet.Format()
		if c.Kind == KindBuckets {
			c.widths = fleet.Widths()
		}
	}
	if err := c.scanRules(q); err != nil {
		return err
	}
	if op == OpPass && !c.more {
		return fmt.Errorf("a pass of a policy without a Rules[].Challenge: %w", driver.ErrInvalidQuery)
	}
	if q.Lockout.For > 0 {
		c.more, c.lock = true, q.Lockout
	}
	if c.more {
		// Everything of the key is in one hash (see redis.lua), the one
		// key the decision declares.
		c.Key = Key(prefix, q.Policy, q.Key) + MoreSuffix
		c.cal = calendarClock(op, q.Now, at, wall)
	}
	c.refund = op == OpRefund
	if cluster {
		c.Slot = Slot(c.Key)
	}
	return nil
}

// scanRules takes what the call needs of q's rules: the most units a
// sliding rule keeps, the bucket widths, and whether a calendar rule or
// a challenge puts the key's state in one hash.
func (c *Call) scanRules(q *driver.Query) error {
	for i, r := range q.Rules {
		if r.Challenge > 0 {
			c.more = true
		}
		if r.Calendar != 0 {
			if r.Calendar > driver.Month {
				return fmt.Errorf("Rules[%d].Calendar: unknown %v: %w", i, r.Calendar, driver.ErrInvalidQuery)
			}
			c.more = true
			continue
		}
		c.cap = max(c.cap, r.Limit)
		if c.Kind == KindBuckets {
			c.bw[i] = max(1, r.Window.Microseconds()/int64(q.Buckets))
		}
	}
	return nil
}

// calendarClock returns the time calendar periods are found around for
// a call of op: the refund's admission, a record's on the clock it came
// from, the query's clock, or else this process's wall clock (the script
// picks the period by the server's clock from boundaries around it).
func calendarClock(op byte, now, at, wall int64) int64 {
	switch {
	case op == OpRefund:
		return at
	case op == OpRecord && now != 0:
		return now - at
	case op == OpRecord:
		return wall - at
	case now != 0:
		return now
	}
	return wall
}

// Lease sets c up for an operation op of lease l on the keys of prefix.
func (c *Call) Lease(prefix string, l driver.Lease, op byte, cluster bool) {
	c.Op, c.Kind, c.lease = op, KindLease, l
	c.Key = Key(prefix, l.Policy, l.Key) + LeaseSuffix
	if cluster {
		c.Slot = Slot(c.Key)
	}
}

// Copy returns a call that asks what c asks, sharing none of c's memory
// but its rules: work that may outlive c's caller runs on the copy.
func (c *Call) Copy() *Call {
	return &Call{Op: c.Op, Kind: c.Kind, Key: c.Key, Slot: c.Slot, n: c.n, cap: c.cap, now: c.now, at: c.at, span: c.span, format: c.format, widths: c.widths,
		rules: c.rules, bw: c.bw, lease: c.lease, more: c.more, lock: c.lock, cal: c.cal, refund: c.refund,
		Done: make(chan struct{}, 1)}
}

// GaveUp marks the call given up by its caller: it is not sent if it has
// not been yet.
func (c *Call) GaveUp() { c.gaveUp.Store(true) }

// Replied marks the call's reply read: the answer is on its way.
func (c *Call) Replied() { c.replied.Store(true) }

// Group splits calls into groups that one script call can decide: of one
// kind and (on a Cluster) one slot, in the order the calls came. It
// appends the groups to dst[:0], whose memory a flusher keeps.
func Group(calls []*Call, cluster bool, dst [][]*Call) [][]*Call {
	groups := dst[:0]
	if len(calls) == 1 {
		c := calls[0]
		c.One[0] = c
		return append(groups, c.One[:])
	}
	for _, c := range calls {
		found := false
		for i, g := range groups {
			if g[0].Kind == c.Kind && (!cluster || g[0].Slot == c.Slot) {
				groups[i] = append(g, c)
				found = true
				break
			}
		}
		if !found {
			groups = append(groups, []*Call{c})
		}
	}
	return groups
}

// Publishes reports whether a group's script call publishes freed keys on
// the invalidation channel, which it then takes as its last argument.
func Publishes(calls []*Call) bool {
	for _, c := range calls {
		if c.refund {
			return true
		}
	}
	return false
}

// Encode packs the arguments of calls, a group of one kind, into the
// blob of the first, and returns them: the argument after the keys.
func Encode(calls []*Call) *Blob {
	lead := calls[0]
	b := lead.Blob.b[:0]
	if len(calls) > 1 {
		size := 0
		for _, c := range calls {
			size += 8 * (9 + 3*len(c.rules) + len(c.widths))
			if c.more {
				size += 8 * (5 + 7*len(c.rules))
			}
		}
		b = slices.Grow(b, size)
	}
	for _, c := range calls {
		b = c.encode(b)
	}
	lead.Blob.b = b
	return &lead.Blob
}

func (c *Call) encode(b []byte) []byte {
	if c.Kind == KindLease {
		l := c.lease
		return appendFloat(b, float64(c.Op), float64(l.N), float64(l.Limit), float64(l.TTL.Microseconds()),
			float64(l.Now), float64(l.Owner), float64(l.Seq))
	}
	op, nr := int(c.Op)+opFormat*c.format, len(c.rules)
	if c.more {
		op += opMore
		nr -= calendarRules(c.rules)
	}
	b = appendFloat(b, float64(op), float64(c.n))
	if c.Kind == KindLog {
		b = appendFloat(b, float64(c.cap))
	}
	b = appendFloat(b, float64(c.span), float64(c.now), float64(nr))
	for i, r := range c.rules {
		if r.Calendar != 0 {
			continue
		}
		b = appendFloat(b, float64(r.Limit), float64(r.Window.Microseconds()))
		if c.Kind == KindBuckets {
			b = appendFloat(b, float64(c.bw[i]))
		}
	}
	if c.Kind == KindBuckets {
		b = c.appendWidths(b)
	}
	if c.Op == OpRefund || c.Op == OpRecord {
		b = appendFloat(b, float64(c.at))
	}
	if c.more {
		b = c.appendMore(b)
	}
	return b
}

// appendWidths packs the bucket widths other instances of the fleet count
// in and c's rules do not (see redis.lua): their number, then each.
func (c *Call) appendWidths(b []byte) []byte {
	n := 0
	for _, g := range c.widths {
		if !c.countsIn(g) {
			n++
		}
	}
	b = appendFloat(b, float64(n))
	for _, g := range c.widths {
		if !c.countsIn(g) {
			b = appendFloat(b, float64(g))
		}
	}
	return b
}

// countsIn reports whether a sliding rule of c counts in buckets g wide.
func (c *Call) countsIn(g int64) bool {
	for i, r := range c.rules {
		if r.Calendar == 0 && c.bw[i] == g {
			return true
		}
	}
	return false
}

// appendMore packs the lockout, calendar rules and challenges of c (see
// redis.lua): per calendar rule four period boundaries around c.cal, the
// start of the period before its, its start and end, and the next one's
// end, so that the script picks the period of its own clock; then how
// long a pass lasts for the sliding rules with a Challenge and, when a
// rule has one, every rule's Challenge (0: none), the sliding rules'
// first, in the order of their states in the reply.
func (c *Call) appendMore(b []byte) []byte {
	b = appendFloat(b, float64(c.lock.For.Microseconds()), float64(c.lock.Max.Microseconds()), float64(calendarRules(c.rules)))
	for _, r := range c.rules {
		if r.Calendar == 0 {
			continue
		}
		start, end := r.Period(time.UnixMicro(c.cal))
		prev, _ := r.Period(start.Add(-time.Microsecond))
		_, next := r.Period(end)
		b = appendFloat(b, float64(r.Limit), float64(r.Calendar),
			float64(prev.UnixMicro()), float64(start.UnixMicro()), float64(end.UnixMicro()), float64(next.UnixMicro()))
	}
	var passFor int64
	nch := 0
	for _, r := range c.rules {
		if r.Challenge > 0 {
			nch = len(c.rules)
			if r.Calendar == 0 {
				passFor = max(passFor, r.Window.Microseconds())
			}
		}
	}
	b = appendFloat(b, float64(passFor), float64(nch))
	if nch == 0 {
		return b
	}
	for _, cal := range [2]bool{false, true} {
		for _, r := range c.rules {
			if (r.Calendar != 0) == cal {
				b = appendFloat(b, float64(r.Challenge))
			}
		}
	}
	return b
}

// calendarRules returns how many of rules are calendar rules.
func calendarRules(rules []driver.Rule) int {
	n := 0
	for i := range rules {
		if rules[i].Calendar != 0 {
			n++
		}
	}
	return n
}

func appendFloat(b []byte, vs ...float64) []byte {
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
	}
	return b
}

// Decode writes to each call of a group its answer from the reply of
// their script call, or err when the call failed.
func Decode(calls []*Call, reply string, err error) {
	if err != nil {
		for _, c := range calls {
			c.Err = err
		}
		return
	}
	r := reply
	next := func() float64 {
		if len(r) < 8 {
			err = ErrShortReply
			return 0
		}
		v := uint64(r[0]) | uint64(r[1])<<8 | uint64(r[2])<<16 | uint64(r[3])<<24 |
			uint64(r[4])<<32 | uint64(r[5])<<40 | uint64(r[6])<<48 | uint64(r[7])<<56
		r = r[8:]
		return math.Float64frombits(v)
	}
	for _, c := range calls {
		if err != nil {
			c.Err = err
			continue
		}
		status, when := next(), next()
		if err != nil {
			c.Err = err
			continue
		}
		if status < 0 {
			n := min(int(when), len(r))
			c.Err = &KeyError{Msg: strings.TrimSpace(r[:n])}
			r = r[n:]
			continue
		}
		status, c.Extra, c.Exempt = grantOf(status)
		c.Allowed, c.Challenged, c.When = status == 1, status == 2, int64(when)
		switch {
		case c.Kind == KindLease:
			if c.Op == OpTake || c.Op == OpPeek {
				c.Used = int64(next())
				next()
				next()
			}
			continue
		case c.Op == OpRefund || c.Op == OpPass || c.Op == OpRecord:
			continue
		}
		c.decodeStates(next)
		if err != nil {
			c.Err = err
		}
	}
}

// decodeStates reads the rule states of a decision: the sliding rules',
// then those of the calendar rules and the lockout.
func (c *Call) decodeStates(next func() float64) {
	var cal [maxRules]driver.RuleState
	rs := cal[:len(c.rules)]
	for i, rl := range c.rules {
		if rl.Calendar != 0 {
			continue // after the sliding rules
		}
		rs[i] = driver.RuleState{Limit: rl.Limit + c.Extra, Window: rl.Window, Used: int64(next()),
			RetryAfter: time.Duration(next()) * time.Microsecond, ResetAfter: time.Duration(next()) * time.Microsecond,
			NextAfter: time.Duration(next()) * time.Microsecond}
	}
	c.LockedFor = 0
	if c.more {
		for i, rl := range c.rules {
			if rl.Calendar != 0 {
				rs[i] = driver.RuleState{Limit: rl.Limit + c.Extra, Calendar: rl.Calendar, Used: int64(next()),
					RetryAfter: time.Duration(next()) * time.Microsecond, ResetAfter: time.Duration(next()) * time.Microsecond,
					Window: time.Duration(next()) * time.Microsecond}
				rs[i].NextAfter = rs[i].ResetAfter
			}
		}
		c.LockedFor = time.Duration(next()) * time.Microsecond
	}
	c.Rules = driver.RuleStates{}
	for _, s := range rs {
		c.Rules.Append(s)
	}
}
