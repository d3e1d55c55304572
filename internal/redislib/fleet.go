package redislib

import (
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekit/ratekit/core/driver"
)

// FleetBeat is how often a driver announces its instance for every policy
// its limiters joined ([driver.Fleet]), and FleetTTL how long an
// announcement counts: an instance that stops is no longer counted after
// at most FleetTTL, one that closes its store at once. Each announcement
// is a member of the policy's sorted set (FleetKey) scored by when it
// ends, in ms by the server's clock; so drivers sharing a Redis count
// each other.
const (
	FleetBeat = 2 * time.Second
	FleetTTL  = 3 * FleetBeat
)

// The stored format: what a release writes in Redis (key names, value
// layouts, the library's arguments) carries a number. A release reads
// every format up to Formats and writes, for each policy, the newest
// that every live instance of the policy announces it reads (see
// Fleet). v0.1.0, the first release, announces itself without a format
// (its member is the instance's name alone): it reads format 1 only.
const (
	// FormatFirst is the format of v0.1.0.
	FormatFirst = 1
	// FormatGrants is the format of the releases that read grants
	// (GrantSuffix): a grant is written only while every live instance
	// of its policy announces it.
	FormatGrants = 2
	// Formats is the newest format this release reads and writes.
	Formats = FormatGrants
)

// Fleet keeps a driver's side of [driver.Fleet]: the policies joined, what
// this instance announces of each, and what the driver last read of
// every instance's announcement: how many there are, the largest Keep
// and Window any announces, the format the policy's keys are written in,
// and the configurations that differ from this instance's. The driver
// announces (see FleetBeat) and hands each answer to Policy.Heard.
//
// An announcement is the member "<instance>|<format>|<keep>|<window
// µs>|<config>|<bucket widths, µs, comma-separated>|<function library>";
// a member without '|' is an instance of v0.1.0, which reads format 1,
// runs the library LegacyLibraries names, and announces nothing else.
type Fleet struct {
	// Instance is this process's name in the fleet keys: random.
	Instance string

	mu       sync.Mutex
	policies map[string]*FleetPolicy
	beat     time.Time // when the fleet was last announced
	closed   bool
	// byName is policies as of the last Join, read without the lock (a
	// decision looks its policy up).
	byName atomic.Pointer[map[string]*FleetPolicy]
}

// FleetPolicy is a policy joined: what this instance announces, and what
// the driver last read of every instance's announcement. Its reads are
// atomic: a decision reads them.
type FleetPolicy struct {
	Name   string
	Member string // what this instance announces

	config string
	keep   int64
	window int64   // µs
	widths []int64 // µs
	differ func([]string)

	count   atomic.Int64            // instances announced, at least 1 once read
	fleetK  atomic.Int64            // the largest Keep announced
	fleetW  atomic.Int64            // the longest Window announced, µs
	fleetG  atomic.Pointer[[]int64] // every bucket width announced, µs
	format  atomic.Int32            // the format the policy's keys are written in
	mu      sync.Mutex
	heardAt int64  // when the members last taken were read (Heard), µs
	differs string // the differing configurations last reported, joined
	report  sync.Mutex
	reports int64 // Heard's changes of differs, the last reported under report
}

// NewFleet returns a fleet that joined no policy.
func NewFleet() *Fleet {
	return &Fleet{Instance: strconv.FormatUint(rand.Uint64(), 36), policies: make(map[string]*FleetPolicy)}
}

// Join adds m's policy, and returns it and whether it is new: the driver
// then announces it at once (it is counted then, not at the next beat).
// Joining twice counts once, with the first Member.
func (f *Fleet) Join(m driver.Member) (p *FleetPolicy, fresh bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p = f.policies[m.Policy]; p != nil {
		return p, false
	}
	w := m.Window.Microseconds()
	widths := make([]int64, 0, len(m.Widths))
	ws := make([]string, 0, len(m.Widths))
	for _, g := range m.Widths {
		if g := g.Microseconds(); g > 0 && !slices.Contains(widths, g) {
			widths = append(widths, g)
			ws = append(ws, strconv.FormatInt(g, 10))
		}
	}
	p = &FleetPolicy{Name: m.Policy, config: m.Config, keep: m.Keep, window: w, widths: widths, differ: m.Differ,
		Member: f.Instance + "|" + strconv.Itoa(Formats) + "|" + strconv.FormatInt(m.Keep, 10) + "|" +
			strconv.FormatInt(w, 10) + "|" + m.Config + "|" + strings.Join(ws, ",") + "|" + LibName}
	// Until the store answers: this instance alone, in the first format,
	// which every release reads.
	p.fleetK.Store(m.Keep)
	p.fleetW.Store(w)
	p.fleetG.Store(&widths)
	p.format.Store(FormatFirst)
	f.policies[m.Policy] = p
	snap := maps.Clone(f.policies)
	f.byName.Store(&snap)
	f.beat = time.Now() // the driver announces it now
	return p, true
}

// Of returns the policy joined under name, or nil.
func (f *Fleet) Of(name string) *FleetPolicy {
	if m := f.byName.Load(); m != nil {
		return (*m)[name]
	}
	return nil
}

// Instances returns the function [driver.Fleet.Join] returns for p: at
// least 1.
func (p *FleetPolicy) Instances() func() int {
	return func() int { return int(max(1, p.count.Load())) }
}

// UntilBeat returns how long until the next announcement is due; 0 (no
// limit) when no policy joined.
func (f *Fleet) UntilBeat() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.policies) == 0 {
		return 0
	}
	return max(time.Millisecond, time.Until(f.beat.Add(FleetBeat)))
}

// Due returns, when an announcement is due, every policy joined, and
// starts the next beat; else nil.
func (f *Fleet) Due() []*FleetPolicy {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.policies) == 0 || time.Since(f.beat) < FleetBeat || f.closed {
		return nil
	}
	f.beat = time.Now()
	return f.all()
}

// all returns the policies joined; f.mu is held.
func (f *Fleet) all() []*FleetPolicy {
	ps := make([]*FleetPolicy, 0, len(f.policies))
	for _, p := range f.policies {
		ps = append(ps, p)
	}
	return ps
}

// Policies returns the policies joined.
func (f *Fleet) Policies() []*FleetPolicy {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.all()
}

// Leave ends the announcements: it returns the policies joined, whose
// members the driver removes, and Due returns none from now on.
func (f *Fleet) Leave() []*FleetPolicy {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return f.all()
}

// Heard takes the members of p's fleet key as the driver read them after
// announcing p (every live instance's, this one's included) at the server
// time at, in µs: their count, the largest Keep and Window announced, the
// format to write (the newest every member reads, no newer than Formats)
// and the differing configurations, reported to p's Differ when they
// changed. Announcements run at once (the beat, Check, a Join): a reading
// older than one already taken is dropped, so that a stale member list
// never undoes a newer one.
func (p *FleetPolicy) Heard(at int64, members []string) {
	h := heard{keep: p.keep, window: p.window, widths: slices.Clone(p.widths), format: Formats}
	for _, m := range members {
		h.add(m, p.config)
	}
	slices.Sort(h.others)
	joined := strings.Join(h.others, ",")
	p.mu.Lock()
	if at < p.heardAt {
		p.mu.Unlock()
		return
	}
	p.heardAt = at
	p.count.Store(int64(max(1, len(members))))
	p.fleetK.Store(h.keep)
	p.fleetW.Store(h.window)
	p.fleetG.Store(&h.widths)
	p.format.Store(int32(h.format))
	changed := joined != p.differs
	p.differs = joined
	var n int64
	if changed {
		p.reports++
		n = p.reports
	}
	p.mu.Unlock()
	if !changed || p.differ == nil {
		return
	}
	// Reported in order: a change that a later one overtook is not.
	p.report.Lock()
	defer p.report.Unlock()
	p.mu.Lock()
	latest := n == p.reports
	p.mu.Unlock()
	if latest {
		p.differ(h.others)
	}
}

// heard is what Heard gathers of a fleet's members.
type heard struct {
	keep, window, format int64
	widths               []int64
	others               []string // configurations other than this instance's
}

// add takes one member's announcement; config is this instance's.
func (h *heard) add(m, config string) {
	parts := strings.SplitN(m, "|", 7)
	if len(parts) < 5 {
		h.format = FormatFirst // v0.1.0: the first format, and nothing more
		return
	}
	if f, err := strconv.ParseInt(parts[1], 10, 32); err == nil {
		h.format = min(h.format, max(FormatFirst, f))
	}
	if k, err := strconv.ParseInt(parts[2], 10, 64); err == nil {
		h.keep = max(h.keep, k)
	}
	if w, err := strconv.ParseInt(parts[3], 10, 64); err == nil {
		h.window = max(h.window, w)
	}
	if c := parts[4]; c != config && !slices.Contains(h.others, c) {
		h.others = append(h.others, c)
	}
	if len(parts) < 6 || parts[5] == "" {
		return
	}
	for _, f := range strings.Split(parts[5], ",") {
		if g, err := strconv.ParseInt(f, 10, 64); err == nil && g > 0 && !slices.Contains(h.widths, g) && len(h.widths) < maxWidths {
			h.widths = append(h.widths, g)
		}
	}
}

// Keep returns the most units per key any live instance of the policy
// asks the store to keep, at least this one's.
func (p *FleetPolicy) Keep() int64 { return p.fleetK.Load() }

// Window returns the longest sliding window of any live instance of the
// policy, in µs, at least this one's.
func (p *FleetPolicy) Window() int64 { return p.fleetW.Load() }

// Widths returns every bucket width, in µs, that a live instance of the
// policy counts in under SlidingBuckets, this one's first.
func (p *FleetPolicy) Widths() []int64 { return *p.fleetG.Load() }

// maxWidths bounds the bucket widths a decision records in: a policy's
// rules in every tier, of a few configurations at once.
const maxWidths = 64

// Format returns the format the policy's keys are written in.
func (p *FleetPolicy) Format() int { return int(p.format.Load()) }

// LegacyLibraries are the function libraries of the releases whose
// instances announce none: v0.1.0's.
var LegacyLibraries = []string{"ratekit_2e60b0f5e3d1"}

// LibraryOf returns the function library an announcement (a fleet key's
// member) says its instance runs: v0.1.0's for one of v0.1.0.
func LibraryOf(member string) string {
	parts := strings.SplitN(member, "|", 7)
	switch {
	case len(parts) < 5:
		return LegacyLibraries[0]
	case len(parts) < 7:
		return ""
	}
	return parts[6]
}

// Unused returns the libraries of libs (a server's, as FUNCTION LIST
// names them) that no instance runs: ratekit's own (named LibName's way),
// but this release's and those members (every live announcement of every
// fleet key of the server) name. Libraries of other programs are never
// unused.
func Unused(libs, members []string) []string {
	used := map[string]bool{LibName: true}
	for _, m := range members {
		used[LibraryOf(m)] = true
	}
	var out []string
	for _, l := range libs {
		if isLibrary(l) && !used[l] {
			out = append(out, l)
		}
	}
	return out
}

// isLibrary reports whether name is the name of a library of ratekit:
// "ratekit_" and twelve lowercase hexadecimal digits.
func isLibrary(name string) bool {
	h, ok := strings.CutPrefix(name, "ratekit_")
	if !ok || len(h) != 12 {
		return false
	}
	for _, c := range h {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// FleetPattern matches the keys of every policy's fleet under any prefix,
// for SCAN.
const FleetPattern = "*:fleet"
