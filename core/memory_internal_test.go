package core

import "testing"

// TestMemShardSameHash: keys whose hashes are equal share a map entry,
// chained, and each is found, removed and found missing on its own,
// whichever of the chain is removed first.
func TestMemShardSameHash(t *testing.T) {
	keys := []string{"a", "b", "c", "d"}
	for _, order := range [][]int{{0, 1, 2, 3}, {3, 2, 1, 0}, {1, 3, 0, 2}, {2, 0, 3, 1}} {
		p := NewMemoryStore().policy("p")
		sh := &p.shards[0]
		const h = 42 // every key, as if they collided
		for _, k := range keys {
			if sh.get(h, k) != nil {
				t.Fatalf("get(%q) before insert = a window, want nil", k)
			}
			p.insert(sh, h, k, 1)
		}
		if len(sh.m) != 1 {
			t.Fatalf("map holds %d hashes, want 1", len(sh.m))
		}
		gone := map[string]bool{}
		for _, i := range order {
			lg := sh.get(h, keys[i])
			if lg == nil || lg.key != keys[i] {
				t.Fatalf("order %v: get(%q) = %v, want its window", order, keys[i], lg)
			}
			sh.remove(lg)
			gone[keys[i]] = true
			for _, k := range keys {
				if got := sh.get(h, k); (got == nil) != gone[k] || got != nil && got.key != k {
					t.Fatalf("order %v, removed %v: get(%q) = %v", order, gone, k, got)
				}
			}
		}
		if len(sh.m) != 0 || len(sh.keys) != 0 || p.keys.Load() != 0 {
			t.Fatalf("order %v: after removing every key: map %d, keys %d, count %d, want 0",
				order, len(sh.m), len(sh.keys), p.keys.Load())
		}
	}
}
