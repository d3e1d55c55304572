package redislib

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// SlotCount is the number of hash slots of a Redis Cluster.
const SlotCount = 16384

// SlotRange is a range of a Cluster's slots, Start to End inclusive, and
// the address (host:port) of the master that serves them, as CLUSTER
// SLOTS names it.
type SlotRange struct {
	Start, End int
	Addr       string
}

// How often Nodes loads the slot map again: every slotsRefresh while it
// is used, and at most every slotsRetry when asked to sooner (a redirect
// seen); while connections to a node fail, and for slotsRefresh after the
// last such failure, every slotsFailRetry, so that a master's replica is
// found as soon as the Cluster promotes it. After failed loads, the pause
// is doubled for each failure in a row, up to slotsRefresh (a client whose
// CLUSTER SLOTS is refused asks every five seconds).
const (
	slotsRefresh   = 5 * time.Second
	slotsRetry     = 500 * time.Millisecond
	slotsFailRetry = 200 * time.Millisecond
	slotsTimeout   = 5 * time.Second // bounds one load, for a client that keeps to the context
)

// Nodes sends the calls of a store on a Redis Cluster through one
// Batcher per master: each call goes to the batcher of the master that
// serves its slot, whose flights carry calls of that master only, so that
// a master that does not answer holds up its own calls and no others
// (each batcher keeps its own flushers and its own bounded queue). The
// batchers are made when a master is first needed.
//
// Which master serves a slot comes from the slot map a driver loads
// (CLUSTER SLOTS): loaded when first needed, again every five seconds
// while the store is used, and sooner when the driver reports it Stale (a
// redirect or a failed node seen). The map only routes calls and names
// partitions: the client still sends each command where its own map says
// and follows MOVED and ASK, so a stale map costs isolation for a few
// seconds, never a wrong decision. Until the map is known, every call
// goes through one shared batcher, as on a single Redis.
//
// A connection to a node that fails (Failed: refused, reset) may be a
// master that died: the map is loaded again at once and every 200 ms
// while such failures go on, and the client is told to load its own
// (Reload) each time, so that both learn the replica the Cluster promotes
// as soon as the Cluster agrees on it, not at their next periodic load.
//
// The loads run on a goroutine of their own, one at a time, started by
// the calls that find the map missing or old; none runs while the store
// is not used. Nodes is safe for concurrent use.
type Nodes struct {
	// Reload, when set before the nodes are used, makes the client load
	// its own slot map again, and returns when it has: called on the
	// goroutine of a load that found the map changed or that ran while
	// connections to nodes fail, before the new map is used (so that the
	// client sends a key's calls to the master whose partition they are
	// in by then). Nil for a client that learns by itself.
	Reload func(ctx context.Context)

	load       func(ctx context.Context) ([]SlotRange, error)
	newBatcher func() *Batcher
	shared     *Batcher // while the map is unknown, and for a slot it does not name

	table    atomic.Pointer[slotTable]
	loading  atomic.Bool  // a load runs
	stale    atomic.Bool  // reported stale: load again at slotsRetry
	lastLoad atomic.Int64 // when the last load began, unix ns
	fails    atomic.Int32 // loads failed in a row
	failedAt atomic.Int64 // when a connection to a node last failed, unix ns

	mu       sync.Mutex
	batchers map[string]*Batcher // by master address
}

// slotTable is one loaded slot map.
type slotTable struct {
	owner    [SlotCount]uint16 // index into addrs, plus one; 0: no master known
	addrs    []string
	batchers []atomic.Pointer[Batcher] // by index into addrs, set when first needed
}

// NewNodes returns the nodes of a Cluster whose slot map load returns;
// newBatcher makes the batcher of a master, and of the calls sent while
// the map is unknown.
func NewNodes(load func(ctx context.Context) ([]SlotRange, error), newBatcher func() *Batcher) *Nodes {
	return &Nodes{load: load, newBatcher: newBatcher, shared: newBatcher(), batchers: make(map[string]*Batcher)}
}

// Do sends c through the batcher of the master that serves c.Slot (see
// Batcher.Do).
func (n *Nodes) Do(ctx context.Context, c *Call) error {
	return n.batcher(c.Slot).Do(ctx, c)
}

// batcher returns the batcher of the master of slot.
func (n *Nodes) batcher(slot int) *Batcher {
	t := n.current()
	if t == nil || slot < 0 || slot >= SlotCount || t.owner[slot] == 0 {
		return n.shared
	}
	i := t.owner[slot] - 1
	if b := t.batchers[i].Load(); b != nil {
		return b
	}
	n.mu.Lock()
	b := n.batchers[t.addrs[i]]
	if b == nil {
		b = n.newBatcher()
		n.batchers[t.addrs[i]] = b
	}
	n.mu.Unlock()
	t.batchers[i].Store(b)
	return b
}

// Addr returns the address of the master that serves slot, and false
// when the slot map is not known yet (or does not name the slot).
func (n *Nodes) Addr(slot int) (string, bool) {
	t := n.current()
	if t == nil || slot < 0 || slot >= SlotCount || t.owner[slot] == 0 {
		return "", false
	}
	return t.addrs[t.owner[slot]-1], true
}

// Partition names the partition of slot for [driver.Partitioned]: the
// address of the master that serves it, or, until the slot map is known,
// the group of slots it belongs to (SlotGroup).
func (n *Nodes) Partition(slot int) string {
	if addr, ok := n.Addr(slot); ok {
		return addr
	}
	return SlotGroup(slot)
}

// Stale reports that the slot map may be out of date (the driver saw a
// redirect): it is loaded again soon, at most every half second.
func (n *Nodes) Stale() { n.stale.Store(true) }

// Failed reports that a connection to a node failed (refused, reset,
// closed): its master may have died, and the Cluster may be promoting a
// replica in its place. The slot map, and the client's (Reload), are
// loaded again at once, and every 200 ms while failures go on (until five
// seconds after the last), one load at a time.
func (n *Nodes) Failed() {
	n.failedAt.Store(time.Now().UnixNano())
	n.current()
}

// current returns the slot map, nil while it is unknown, and starts a
// load when it is missing, old, reported stale, or while nodes fail.
func (n *Nodes) current() *slotTable {
	t := n.table.Load()
	now := time.Now().UnixNano()
	since := time.Duration(now - n.lastLoad.Load())
	pause := slotsRetry
	failing := time.Duration(now-n.failedAt.Load()) < slotsRefresh
	if failing {
		pause = slotsFailRetry
	}
	due := since >= slotsRefresh
	if !due && since >= pause {
		if f := n.fails.Load(); f > 0 {
			due = since >= pause<<min(f-1, 4)
		} else {
			due = failing || t == nil || n.stale.Load()
		}
	}
	if due && n.loading.CompareAndSwap(false, true) {
		n.lastLoad.Store(now)
		n.stale.Store(false)
		go n.refresh(failing)
	}
	return t
}

// refresh loads the slot map, and the client's when the map changed or
// nodes are failing; loading is set, and cleared when it ends.
func (n *Nodes) refresh(failing bool) {
	defer n.loading.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), slotsTimeout)
	defer cancel()
	ranges, err := n.load(ctx)
	var t *slotTable
	if err == nil {
		t, err = newSlotTable(ranges)
	}
	if err != nil {
		n.fails.Add(1)
		return // the last map, if any, still routes
	}
	n.fails.Store(0)
	old := n.table.Load()
	if n.Reload != nil && old != nil && (failing || old.owner != t.owner || !slices.Equal(old.addrs, t.addrs)) {
		// The Cluster moved slots or replaced a master, or may be
		// doing so: the client learns it now, not at its next periodic
		// load, and before the partitions follow the new map.
		n.Reload(ctx)
	}
	n.table.Store(t)
	// The batchers of masters gone finish what they hold, then end.
	n.mu.Lock()
	for addr := range n.batchers {
		if !t.has(addr) {
			delete(n.batchers, addr)
		}
	}
	n.mu.Unlock()
}

// newSlotTable builds the map of ranges.
func newSlotTable(ranges []SlotRange) (*slotTable, error) {
	t := new(slotTable)
	index := make(map[string]uint16)
	for _, r := range ranges {
		if r.Start < 0 || r.End >= SlotCount || r.Start > r.End || r.Addr == "" {
			return nil, fmt.Errorf("slot range %d-%d of %q: %w", r.Start, r.End, r.Addr, errBadSlots)
		}
		i, ok := index[r.Addr]
		if !ok {
			t.addrs = append(t.addrs, r.Addr)
			i = uint16(len(t.addrs))
			index[r.Addr] = i
		}
		for s := r.Start; s <= r.End; s++ {
			t.owner[s] = i
		}
	}
	if len(t.addrs) == 0 {
		return nil, fmt.Errorf("no slot range: %w", errBadSlots)
	}
	t.batchers = make([]atomic.Pointer[Batcher], len(t.addrs))
	return t, nil
}

var errBadSlots = errors.New("unusable cluster slot map")

func (t *slotTable) has(addr string) bool {
	for _, a := range t.addrs {
		if a == addr {
			return true
		}
	}
	return false
}

// slotGroups is the number of groups of slots SlotGroup names, each of
// SlotCount/slotGroups slots.
const slotGroups = 64

// groupNames names the groups of slots.
var groupNames = func() [slotGroups]string {
	var names [slotGroups]string
	for i := range names {
		names[i] = "slots-" + strconv.Itoa(i)
	}
	return names
}()

// SlotGroup names the fixed group of 256 slots that holds slot: the
// partition of a key while the slot map is not known. (Such a group may
// straddle two masters; the address of the slot's master, once known,
// does not.)
func SlotGroup(slot int) string {
	return groupNames[(slot&(SlotCount-1))*slotGroups/SlotCount]
}
