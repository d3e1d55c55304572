package core

import (
	"math/bits"
	"strings"

	"github.com/ratekit/ratekit/core/driver"
)

// topk is a Space-Saving sketch (Metwally, Agrawal and El Abbadi, 2005)
// of the keys seen most, in fixed memory: at most size counters, however
// many keys it is shown. A key it counts has count ≥ its true weight ≥
// count − err; err is 0 for a key counted since the sketch was last
// empty, so while the keys seen fit the counters every count is exact,
// and a key whose weight exceeds the total over size is always counted.
// A new key beyond size takes the counter of the least counted key, with
// that key's count as its error.
//
// The counters never move: a min-heap of their indices finds the least
// counted, and an open-addressing table (linear probing, deletion by
// backward shift, no tombstones) finds a key's counter. Adding allocates
// nothing. It is not safe for concurrent use.
type topk struct {
	c     []topCounter // len ≤ cap(c) = size
	heap  []int32      // indices of c, a min-heap by count
	table []int32      // index of c + 1 by probing from the key's hash; 0: empty
	mask  uint64       // len(table) - 1
}

// topCounter is one counter of a [topk].
type topCounter struct {
	key   string
	hash  uint64
	count int64 // never below the key's true weight
	err   int64 // by how much count may exceed it
	pos   int32 // in topk.heap
}

// newTopk returns an empty sketch of size counters; size > 0.
func newTopk(size int) *topk {
	n := 1 << bits.Len(uint(2*size-1)) // at least twice size: short probes
	return &topk{
		c:     make([]topCounter, 0, size),
		heap:  make([]int32, 0, size),
		table: make([]int32, n),
		mask:  uint64(n - 1),
	}
}

// add adds w > 0 to the weight of key, whose hash is h (a well-mixed
// hash, the same for every use of the sketch). A key the sketch starts
// counting is copied (see memPolicy.insert).
func (t *topk) add(key string, h uint64, w int64) {
	if i := t.find(key, h); i >= 0 {
		t.c[i].count += w
		t.down(int(t.c[i].pos))
		return
	}
	if len(t.c) < cap(t.c) {
		i := int32(len(t.c))
		t.c = append(t.c, topCounter{key: strings.Clone(key), hash: h, count: w, pos: int32(len(t.heap))})
		t.heap = append(t.heap, i)
		t.insert(h, i)
		t.up(len(t.heap) - 1)
		return
	}
	// Full: the least counted key gives up its counter, and its count
	// becomes the newcomer's error.
	i := t.heap[0]
	c := &t.c[i]
	t.delete(c.key, c.hash)
	c.key, c.hash, c.err, c.count = key, h, c.count, c.count+w
	t.insert(h, i)
	t.down(0)
}

// len returns the number of keys counted.
func (t *topk) len() int { return len(t.c) }

// drain appends every key counted to out with its guaranteed weight,
// count − err (at least 1, and exact for a key counted since the sketch
// was empty), empties the sketch and returns out.
func (t *topk) drain(out []driver.RefusedKey) []driver.RefusedKey {
	for i := range t.c {
		out = append(out, driver.RefusedKey{Key: t.c[i].key, Refusals: t.c[i].count - t.c[i].err})
	}
	clear(t.c) // drop the keys for the collector
	t.c, t.heap = t.c[:0], t.heap[:0]
	clear(t.table)
	return out
}

// find returns the index of key's counter, -1 if it has none.
func (t *topk) find(key string, h uint64) int32 {
	for j := h & t.mask; ; j = (j + 1) & t.mask {
		e := t.table[j]
		if e == 0 {
			return -1
		}
		if c := &t.c[e-1]; c.hash == h && c.key == key {
			return e - 1
		}
	}
}

// insert puts counter i, of hash h, in the table.
func (t *topk) insert(h uint64, i int32) {
	j := h & t.mask
	for t.table[j] != 0 {
		j = (j + 1) & t.mask
	}
	t.table[j] = i + 1
}

// delete removes key's counter from the table, shifting back the entries
// that probed past it (Knuth's algorithm R), so that no tombstone is left.
func (t *topk) delete(key string, h uint64) {
	j := h & t.mask
	for {
		e := t.table[j]
		if e == 0 {
			return // not there
		}
		if c := &t.c[e-1]; c.hash == h && c.key == key {
			break
		}
		j = (j + 1) & t.mask
	}
	t.table[j] = 0
	for k := (j + 1) & t.mask; t.table[k] != 0; k = (k + 1) & t.mask {
		home := t.c[t.table[k]-1].hash & t.mask
		// The entry at k stays unless the hole at j lies on its probe
		// path, from home to k (cyclically).
		if j <= k && (home <= j || home > k) || j > k && home <= j && home > k {
			t.table[j], t.table[k] = t.table[k], 0
			j = k
		}
	}
}

// up and down restore the heap after the count at heap position p fell
// or grew.
func (t *topk) up(p int) {
	for p > 0 {
		parent := (p - 1) / 2
		if t.count(parent) <= t.count(p) {
			return
		}
		t.swap(p, parent)
		p = parent
	}
}

func (t *topk) down(p int) {
	n := len(t.heap)
	for {
		least := p
		if l := 2*p + 1; l < n && t.count(l) < t.count(least) {
			least = l
		}
		if r := 2*p + 2; r < n && t.count(r) < t.count(least) {
			least = r
		}
		if least == p {
			return
		}
		t.swap(p, least)
		p = least
	}
}

func (t *topk) count(p int) int64 { return t.c[t.heap[p]].count }

func (t *topk) swap(a, b int) {
	t.heap[a], t.heap[b] = t.heap[b], t.heap[a]
	t.c[t.heap[a]].pos = int32(a)
	t.c[t.heap[b]].pos = int32(b)
}
