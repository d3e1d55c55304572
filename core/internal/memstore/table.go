package memstore

// memTable finds a shard's keys by their hashes: open addressing with
// linear probing over slots of (hash, log), indexed by bits of the hash
// that the choice of the shard (its low bits) leaves, so that a key is
// hashed once (Policy.shard) and found with one or two reads of adjacent
// slots, where a Go map would hash the hash again and go through its
// directory and table to a group. Keys with equal hashes are chained from
// their slot (memLog.next). Its zero value is empty; sh.mu guards it.
type memTable struct {
	slots []memTableSlot // a power of two of them, or none
	n     int            // slots in use
}

// memTableSlot is a hash and the first log of its chain; lg is nil in a
// free slot.
type memTableSlot struct {
	h  uint64
	lg *memLog
}

// memTableMin is the fewest slots a table that holds a key has.
const memTableMin = 8

// index returns the slot where the probe for h starts: the hash's bits
// above those that chose the shard (memShards is 64, six bits).
func (t *memTable) index(h uint64) int {
	return int(h>>6) & (len(t.slots) - 1)
}

// head returns the first log of h's chain, or nil.
func (t *memTable) head(h uint64) *memLog {
	if i := t.find(h); i >= 0 {
		return t.slots[i].lg
	}
	return nil
}

// find returns the index of h's slot, or -1.
func (t *memTable) find(h uint64) int {
	if len(t.slots) == 0 {
		return -1
	}
	mask := len(t.slots) - 1
	for i := t.index(h); ; i = (i + 1) & mask {
		switch s := &t.slots[i]; {
		case s.lg == nil:
			return -1
		case s.h == h:
			return i
		}
	}
}

// push makes lg, whose key hashes to h, the first log of h's chain.
func (t *memTable) push(h uint64, lg *memLog) {
	if i := t.find(h); i >= 0 {
		s := &t.slots[i]
		lg.next, s.lg = s.lg, lg
		return
	}
	lg.next = nil
	if (t.n+1)*4 > len(t.slots)*3 {
		t.grow()
	}
	t.put(memTableSlot{h: h, lg: lg})
	t.n++
}

// put stores s in the first free slot of its probe; there is one.
func (t *memTable) put(s memTableSlot) {
	mask := len(t.slots) - 1
	i := t.index(s.h)
	for t.slots[i].lg != nil {
		i = (i + 1) & mask
	}
	t.slots[i] = s
}

// grow doubles the slots (memTableMin at first) and puts every hash
// held in its place.
func (t *memTable) grow() {
	old := t.slots
	t.slots = make([]memTableSlot, max(memTableMin, 2*len(old)))
	for _, s := range old {
		if s.lg != nil {
			t.put(s)
		}
	}
}

// unlink takes lg, whose key hashes to h, out of h's chain, and frees
// h's slot when the chain is empty.
func (t *memTable) unlink(h uint64, lg *memLog) {
	i := t.find(h)
	if i < 0 {
		return
	}
	s := &t.slots[i]
	switch {
	case s.lg == lg && lg.next == nil:
		t.free(i)
	case s.lg == lg:
		s.lg = lg.next
	default:
		for k := s.lg; k != nil; k = k.next {
			if k.next == lg {
				k.next = lg.next
				return
			}
		}
	}
}

// free empties slot i and moves back the slots after it whose probes
// would no longer reach them (backward-shift deletion: no tombstones).
func (t *memTable) free(i int) {
	mask := len(t.slots) - 1
	for j := (i + 1) & mask; t.slots[j].lg != nil; j = (j + 1) & mask {
		k := t.index(t.slots[j].h)
		// The slot stays if its probe starts cyclically in (i, j].
		if i <= j && i < k && k <= j || i > j && (i < k || k <= j) {
			continue
		}
		t.slots[i] = t.slots[j]
		i = j
	}
	t.slots[i] = memTableSlot{}
	t.n--
}
