package core

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"testing"
)

// check fails t unless the sketch's table, heap and counters agree: every
// counter is found by its key, the table holds nothing else, and the heap
// is a min-heap whose positions the counters know.
func (tk *topk) check(t *testing.T) {
	t.Helper()
	entries := 0
	for _, e := range tk.table {
		if e != 0 {
			entries++
		}
	}
	if entries != len(tk.c) || len(tk.heap) != len(tk.c) {
		t.Fatalf("table holds %d entries, heap %d, for %d counters", entries, len(tk.heap), len(tk.c))
	}
	for i := range tk.c {
		c := &tk.c[i]
		if got := tk.find(c.key, c.hash); got != int32(i) {
			t.Fatalf("find(%q) = %d, want %d", c.key, got, i)
		}
		if tk.heap[c.pos] != int32(i) {
			t.Fatalf("counter %d at heap position %d, which holds %d", i, c.pos, tk.heap[c.pos])
		}
	}
	for p := 1; p < len(tk.heap); p++ {
		if tk.count(p) < tk.count((p-1)/2) {
			t.Fatalf("heap position %d counts %d, below its parent's %d", p, tk.count(p), tk.count((p-1)/2))
		}
	}
}

// TestTopkExactWhileItFits: while the keys fit the counters, every count
// is exact and carries no error.
func TestTopkExactWhileItFits(t *testing.T) {
	seed := maphash.MakeSeed()
	tk := newTopk(32)
	want := map[string]int64{}
	for i := range 1000 {
		k := fmt.Sprintf("k%d", i%32)
		w := int64(i%7 + 1)
		tk.add(k, maphash.String(seed, k), w)
		want[k] += w
	}
	tk.check(t)
	got := tk.drain(nil)
	if len(got) != 32 {
		t.Fatalf("drain returned %d keys, want 32", len(got))
	}
	for _, g := range got {
		if g.Refusals != want[g.Key] {
			t.Errorf("%s: %d, want %d", g.Key, g.Refusals, want[g.Key])
		}
	}
	if tk.len() != 0 {
		t.Errorf("len after drain = %d, want 0", tk.len())
	}
	tk.check(t)
}

// TestTopkModel drives the sketch with skewed weighted streams over many
// more keys than it counts, and checks the Space-Saving guarantees
// against exact counts: count - err ≤ true weight ≤ count for every key
// counted, every key heavier than total/size is counted, and the table
// stays consistent through the replacements (deletion by backward shift).
func TestTopkModel(t *testing.T) {
	for _, size := range []int{1, 2, 7, 32, 64} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(size), 42))
			seed := maphash.MakeSeed()
			tk := newTopk(size)
			exact := map[string]int64{}
			var total int64
			for i := range 20000 {
				var k string
				if rng.IntN(3) == 0 {
					k = fmt.Sprintf("heavy%d", rng.IntN(4)) // a quarter of a third each
				} else {
					k = fmt.Sprintf("k%d", rng.IntN(5000))
				}
				w := int64(1 + rng.IntN(3))
				tk.add(k, maphash.String(seed, k), w)
				exact[k] += w
				total += w
				if i%997 == 0 {
					tk.check(t)
				}
			}
			tk.check(t)
			counted := map[string]bool{}
			for i := range tk.c {
				c := &tk.c[i]
				counted[c.key] = true
				if tw := exact[c.key]; c.count-c.err > tw || tw > c.count {
					t.Errorf("%s: count %d err %d, true weight %d", c.key, c.count, c.err, tw)
				}
			}
			for k, w := range exact {
				if w*int64(size) > total && !counted[k] {
					t.Errorf("%s weighs %d of %d, over 1/%d, and is not counted", k, w, total, size)
				}
			}
		})
	}
}

// TestTopkAddAllocs: adding, a known key or a new one replacing another,
// allocates nothing.
func TestTopkAddAllocs(t *testing.T) {
	seed := maphash.MakeSeed()
	tk := newTopk(32)
	keys := make([]string, 1000)
	hashes := make([]uint64, len(keys))
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%d", i)
		hashes[i] = maphash.String(seed, keys[i])
	}
	i := 0
	if a := testing.AllocsPerRun(10000, func() {
		tk.add(keys[i%len(keys)], hashes[i%len(keys)], 1)
		i += 7
	}); a != 0 {
		t.Errorf("add: %v allocations, want 0", a)
	}
}
