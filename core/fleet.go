package core

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ratekit/ratekit/core/driver"
)

// The fleet: on a store shared by several instances ([driver.Fleet]),
// every limiter announces its policy with a fingerprint of its
// configuration (rules, algorithm, lockout, tiers), the most units per
// key it needs kept and its longest window. The store counts the
// instances (FailLocal shares a limit among them), keeps for every
// instance what the one that needs the most needs (a limiter of 5 per
// second does not trim away what another instance's 20 per minute
// counts), and tells each limiter of the configurations that differ from
// its own: one policy name limited two ways is a mistake (two services
// that picked one name, or a deploy that changed a rule while the old
// release still runs), reported by an [EventRulesDiffer] event (or a log
// line) and by [Limiter.Check], at start and whenever it begins or ends.

// join announces l's policy on f (the limiter's tiers included), tiers
// being the parent's.
func (l *Limiter) join(f driver.Fleet, o options) {
	p := l.policy
	keep, window := l.keep, slidingWindow(p.Rules)
	widths := bucketWidths(p, p.Rules, nil)
	names := make([]string, 0, len(o.tiers))
	for name, rules := range o.tiers {
		names = append(names, name)
		keep, window = max(keep, slidingMax(rules)), max(window, slidingWindow(rules))
		widths = bucketWidths(p, rules, widths)
	}
	slices.Sort(names)
	var b strings.Builder
	describe(&b, p.Rules)
	fmt.Fprintf(&b, "a%d b%d l%d,%d s%d f%d t%d", p.Algorithm, p.buckets(), p.Lockout.For.Microseconds(),
		p.Lockout.Max.Microseconds(), p.Shards, p.InFlight, p.leaseTTL().Milliseconds())
	for _, name := range names {
		fmt.Fprintf(&b, " %q:", name)
		describe(&b, o.tiers[name])
	}
	sum := sha256.Sum256([]byte(b.String()))
	l.differ.self = hex.EncodeToString(sum[:6])
	l.fleet = f.Join(driver.Member{Policy: p.Name, Config: l.differ.self, Keep: keep, Window: window, Widths: widths, Differ: l.differs})
}

// describe writes rules to b, as the fingerprint of a configuration reads
// them.
func describe(b *strings.Builder, rules []Rule) {
	for _, r := range rules {
		loc := ""
		if r.Location != nil {
			loc = r.Location.String()
		}
		fmt.Fprintf(b, "[%d/%d c%d %s x%d]", r.Limit, r.Window.Microseconds(), r.Calendar, loc, r.Challenge)
	}
}

// bucketWidths appends to ws the widths of the buckets the sliding rules
// of rules count in under p's SlidingBuckets (none under SlidingLog).
func bucketWidths(p Policy, rules []Rule, ws []time.Duration) []time.Duration {
	if p.Algorithm != SlidingBuckets {
		return ws
	}
	q := driver.Query{Buckets: p.buckets()}
	for _, r := range rules {
		if r.Calendar == 0 {
			if g := time.Duration(q.BucketWidth(driver.Rule(r))) * time.Microsecond; !slices.Contains(ws, g) {
				ws = append(ws, g)
			}
		}
	}
	return ws
}

// slidingWindow returns the longest window of the sliding rules of rules.
func slidingWindow(rules []Rule) time.Duration {
	var w time.Duration
	for _, r := range rules {
		if r.Calendar == 0 {
			w = max(w, r.Window)
		}
	}
	return w
}

// differ keeps what the store last said of the configurations that other
// instances announce for a limiter's policy.
type differ struct {
	self string // this limiter's

	mu     sync.Mutex
	others []string
}

// differs takes the configurations that other instances announce for the
// policy and that differ from this limiter's, and reports a change.
func (l *Limiter) differs(others []string) {
	d := &l.differ
	d.mu.Lock()
	was := len(d.others) > 0
	d.others = slices.Clone(others)
	d.mu.Unlock()
	if len(others) == 0 && !was {
		return
	}
	e := Event{Kind: EventRulesDiffer}
	if len(others) > 0 {
		e.Err = l.differErr(others)
	}
	l.notice(context.Background(), e)
}

// differErr describes the other configurations of the policy.
func (l *Limiter) differErr(others []string) error {
	return fmt.Errorf("ratekit: policy %q: %d other configuration(s) of the policy in use on this store (%s; this instance's is %s): instances limit the policy's keys differently",
		l.policy.Name, len(others), strings.Join(others, ", "), l.differ.self)
}

// differing returns the error of the other configurations of the policy
// that the store last reported; nil when every instance agrees.
func (l *Limiter) differing() error {
	d := &l.differ
	d.mu.Lock()
	others := d.others
	d.mu.Unlock()
	if len(others) == 0 {
		return nil
	}
	return l.differErr(others)
}
