package redislib

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekit/ratekit/core/driver"
)

// Watchers hands what a driver hears on its invalidation channel to the
// limiters that watch it ([driver.Invalidator]). A refund or reset publishes
// the Redis key on the channel, a tier invalidation the key's name with
// TierSuffix; messages sent while the subscription is down are lost, so
// the driver reports each (re)subscription, and every watcher then
// resyncs. The driver subscribes, and calls Subscribed, Lost and Message.
type Watchers struct {
	prefix string

	mu         sync.Mutex
	byPolicy   map[string][]func(driver.Invalidation)
	subscribed bool // the subscription is confirmed
}

// NewWatchers returns the watchers of the keys under prefix.
func NewWatchers(prefix string) *Watchers {
	return &Watchers{prefix: prefix, byPolicy: make(map[string][]func(driver.Invalidation))}
}

// Add makes f hear every invalidation of policy's keys from now on: a
// Resync at once when the subscription is confirmed already (f then
// hears everything), else at its confirmation.
func (w *Watchers) Add(policy string, f func(driver.Invalidation)) {
	w.mu.Lock()
	w.byPolicy[policy] = append(w.byPolicy[policy], f)
	subscribed := w.subscribed
	w.mu.Unlock()
	if subscribed {
		f(driver.Invalidation{Resync: true})
	}
}

// Subscribed reports a subscription confirmed: invalidations sent before
// it may have been missed, so every watcher hears Resync.
func (w *Watchers) Subscribed() {
	w.mu.Lock()
	w.subscribed = true
	var fs []func(driver.Invalidation)
	for _, f := range w.byPolicy {
		fs = append(fs, f...)
	}
	w.mu.Unlock()
	for _, f := range fs {
		f(driver.Invalidation{Resync: true})
	}
}

// Lost reports the subscription lost: until it is confirmed again, a
// watcher added hears no Resync.
func (w *Watchers) Lost() {
	w.mu.Lock()
	w.subscribed = false
	w.mu.Unlock()
}

// Message hands the payload of a message on the channel to the watchers
// of its policy; a payload that names no limiter key is ignored.
func (w *Watchers) Message(payload string) {
	rk, tier := strings.CutSuffix(payload, TierSuffix)
	policy, key, ok := ParseKey(w.prefix, rk)
	if !ok {
		return
	}
	w.mu.Lock()
	fs := w.byPolicy[policy]
	w.mu.Unlock()
	for _, f := range fs {
		f(driver.Invalidation{Key: key, Tier: tier})
	}
}

// FleetBeat is how often a driver announces its instance for every policy
// its limiters joined ([driver.Fleet]), and FleetTTL how long an
// announcement counts: an instance that stops is no longer counted after
// at most FleetTTL. Each announcement is a member of the policy's sorted
// set (FleetKey) scored by when it ends, in ms by the server's clock; so
// drivers sharing a Redis count each other.
const (
	FleetBeat = 2 * time.Second
	FleetTTL  = 3 * FleetBeat
)

// Fleet keeps a driver's side of [driver.Fleet]: the policies joined, the
// instances last counted for each, and when they are next due to be
// announced. The driver announces them (see FleetBeat).
type Fleet struct {
	// Instance is this process's member in the fleet keys: random.
	Instance string

	mu     sync.Mutex
	counts map[string]*atomic.Int64 // by policy name
	beat   time.Time                // when the fleet was last announced
}

// NewFleet returns a fleet that joined no policy.
func NewFleet() *Fleet {
	return &Fleet{Instance: strconv.FormatUint(rand.Uint64(), 36), counts: make(map[string]*atomic.Int64)}
}

// Join adds policy, and returns where its count of instances is kept and
// whether the policy is new: the driver then announces it at once (it is
// counted then, not at the next beat). Joining twice counts once.
func (f *Fleet) Join(policy string) (n *atomic.Int64, fresh bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n = f.counts[policy]
	if n != nil {
		return n, false
	}
	n = new(atomic.Int64)
	f.counts[policy] = n
	f.beat = time.Now() // the driver announces it now
	return n, true
}

// Instances returns the function [driver.Fleet.Join] returns for a count n:
// at least 1.
func Instances(n *atomic.Int64) func() int {
	return func() int { return int(max(1, n.Load())) }
}

// UntilBeat returns how long until the next announcement is due; 0 (no
// limit) when no policy joined.
func (f *Fleet) UntilBeat() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.counts) == 0 {
		return 0
	}
	return max(time.Millisecond, time.Until(f.beat.Add(FleetBeat)))
}

// Due returns, when an announcement is due, every policy joined and its
// count, and starts the next beat; else nil.
func (f *Fleet) Due() map[string]*atomic.Int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.counts) == 0 || time.Since(f.beat) < FleetBeat {
		return nil
	}
	f.beat = time.Now()
	due := make(map[string]*atomic.Int64, len(f.counts))
	for p, n := range f.counts {
		due[p] = n
	}
	return due
}

// Policies returns the policies joined.
func (f *Fleet) Policies() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	ps := make([]string, 0, len(f.counts))
	for p := range f.counts {
		ps = append(ps, p)
	}
	return ps
}
