package redislib

import (
	"strings"
	"sync"

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
	var inv driver.Invalidation
	rk, tier := strings.CutSuffix(payload, TierSuffix)
	if !tier {
		if r, ok := strings.CutSuffix(rk, ResetSuffix); ok {
			rk, inv.Reset = r, true
		} else if r, ok := strings.CutSuffix(rk, PassSuffix); ok {
			rk, inv.Pass = r, true
		}
	}
	policy, key, ok := ParseKey(w.prefix, rk)
	if !ok {
		return
	}
	inv.Key, inv.Tier = key, tier
	w.mu.Lock()
	fs := w.byPolicy[policy]
	w.mu.Unlock()
	for _, f := range fs {
		f(inv)
	}
}
