package memstore

import (
	"math/rand/v2"
	"testing"
)

// TestMemTable: the table finds what a Go map of chains finds, through
// growth, colliding probes, equal hashes chained and removals that shift
// slots back, and its count of hashes is the map's.
func TestMemTable(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var tab memTable
	ref := map[uint64][]*memLog{} // each chain, newest first
	var live []*memLog
	hashOf := map[*memLog]uint64{}
	// Few distinct index bits, so that probes collide and wrap; some
	// hashes repeat, so that chains form.
	newHash := func() uint64 { return rng.Uint64N(8)<<6 | rng.Uint64N(4)<<40 | rng.Uint64N(64) }
	for step := range 6000 {
		if len(live) == 0 || rng.IntN(5) < 3 {
			lg, h := new(memLog), newHash()
			tab.push(h, lg)
			ref[h] = append([]*memLog{lg}, ref[h]...)
			live = append(live, lg)
			hashOf[lg] = h
		} else {
			i := rng.IntN(len(live))
			lg := live[i]
			h := hashOf[lg]
			tab.unlink(h, lg)
			live[i] = live[len(live)-1]
			live = live[:len(live)-1]
			c := ref[h]
			for j := range c {
				if c[j] == lg {
					c = append(c[:j:j], c[j+1:]...)
					break
				}
			}
			if len(c) == 0 {
				delete(ref, h)
			} else {
				ref[h] = c
			}
		}
		if tab.n != len(ref) {
			t.Fatalf("step %d: table holds %d hashes, want %d", step, tab.n, len(ref))
		}
		if h := newHash(); ref[h] == nil && tab.head(h) != nil {
			t.Fatalf("step %d: hash %#x found, none held", step, h)
		}
		if step%50 != 0 {
			continue
		}
		for h, c := range ref {
			k := tab.head(h)
			for j, want := range c {
				if k != want {
					t.Fatalf("step %d: hash %#x: chain entry %d differs", step, h, j)
				}
				k = k.next
			}
			if k != nil {
				t.Fatalf("step %d: hash %#x: chain longer than %d", step, h, len(c))
			}
		}
	}
}
