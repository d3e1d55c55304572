package memstore

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/ratekit/ratekit/core/driver"
)

// TestMemShardSameHash: keys whose hashes are equal share a map entry,
// chained, and each is found, removed and found missing on its own,
// whichever of the chain is removed first.
func TestMemShardSameHash(t *testing.T) {
	keys := []string{"a", "b", "c", "d"}
	for _, order := range [][]int{{0, 1, 2, 3}, {3, 2, 1, 0}, {1, 3, 0, 2}, {2, 0, 3, 1}} {
		p := New().policy("p")
		sh := &p.shards[0]
		const h = 42 // every key, as if they collided
		for _, k := range keys {
			if sh.get(h, k) != nil {
				t.Fatalf("get(%q) before insert = a window, want nil", k)
			}
			p.insert(sh, h, k, 1)
		}
		if sh.tab.n != 1 {
			t.Fatalf("map holds %d hashes, want 1", sh.tab.n)
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
		if sh.tab.n != 0 || len(sh.keys) != 0 || p.keys.Load() != 0 {
			t.Fatalf("order %v: after removing every key: map %d, keys %d, count %d, want 0",
				order, sh.tab.n, len(sh.keys), p.keys.Load())
		}
	}
}

// TestMemLogCopiesKept: a log's copy of its newest event (last, lastN,
// lastCum) stays that event's, consistent with the event before it, and the first rule's window
// start found from its copy (startAt, startBase, startPrev) is the one a
// search finds, through takes in order and out of order (a clock stepped
// back), merges into one microsecond, refunds that empty an event or
// not, and windows that drop whole chunks.
func TestMemLogCopiesKept(t *testing.T) {
	p := New().policy("p")
	rules := []driver.Rule{{Limit: 300, Window: 5 * time.Millisecond}, {Limit: 900, Window: 20 * time.Millisecond}}
	rng := rand.New(rand.NewPCG(3, 5))
	now := int64(1_000_000)
	var taken []int64
	for step := range 20000 {
		switch r := rng.IntN(100); {
		case r < 5:
			now -= rng.Int64N(2000)
		case r < 30:
			// the same microsecond: merged into the newest event
		default:
			now += rng.Int64N(60)
		}
		q := driver.Query{Policy: "p", Key: "k", Rules: rules, N: 1 + rng.Int64N(3), Now: now}
		if rng.IntN(8) == 0 && len(taken) > 0 {
			i := rng.IntN(len(taken))
			p.Refund(&q, taken[i])
			taken = slices.Delete(taken, i, i+1)
		} else {
			var st driver.Result
			if p.Decide(&q, true, &st); st.Allowed {
				taken = append(taken, st.At)
			}
		}
		sh, h := p.shard("k")
		lg := sh.get(h, "k")
		if lg == nil || lg.n == lg.head {
			continue
		}
		// The newest event in its chunk has its time; once flushed, its
		// units and total too.
		e := lg.event(int(lg.n) - 1)
		if lg.last != e.at {
			t.Fatalf("step %d: last = %d; newest event at %d", step, lg.last, e.at)
		}
		saved := *e
		lg.flush()
		if prev := int64(0); lg.n-lg.head > 1 {
			prev = lg.event(int(lg.n) - 2).cum
			if e.cum-prev != e.n {
				t.Fatalf("step %d: flushed newest event holds %d units, running total %d after %d", step, e.n, e.cum, prev)
			}
		}
		*e = saved // as if not flushed
		// The first rule's window start, wherever the next decision's
		// window starts, as a search from the head finds it.
		for _, next := range []int64{now, now + rng.Int64N(3000), now - rng.Int64N(3000)} {
			cutoff := next - rules[0].Window.Microseconds()
			want := lg.after(int(lg.head), int(lg.n), cutoff)
			var wantBase, wantFirst int64
			if want < int(lg.n) {
				e := lg.event(want)
				wantBase, wantFirst = e.cum-e.n, e.at
			}
			saved := *lg
			c, base, first := lg.startOf(0, cutoff)
			*lg = saved // as if not asked
			if c != want || base != wantBase || first != wantFirst {
				t.Fatalf("step %d: startOf(0, %d) = %d, %d, %d; want %d, %d, %d", step, cutoff, c, base, first, want, wantBase, wantFirst)
			}
		}
	}
}

// TestMemLayout: a key's window and a shard fill whole cache lines (see
// memLog and memShard), so that the allocator keeps them on cache-line
// boundaries and no two shards' locks share a line.
func TestMemLayout(t *testing.T) {
	if got := unsafe.Sizeof(memLog{}); got != 192 {
		t.Errorf("memLog is %d bytes, want 192", got)
	}
	if got := unsafe.Offsetof(memLog{}.expires); got >= 64 {
		t.Errorf("memLog.expires at byte %d, want it in the first line, with the other fields a decision writes", got)
	}
	if got := unsafe.Offsetof(memLog{}.ev); got != 64 {
		t.Errorf("memLog.ev at byte %d, want 64 (the second line)", got)
	}
	if got := unsafe.Offsetof(memLog{}.startPrev); got >= 128 {
		t.Errorf("memLog.startPrev at byte %d, want it in the second line", got)
	}
	if got := unsafe.Sizeof(memShard{}); got != 128 {
		t.Errorf("memShard is %d bytes, want 128", got)
	}
}
