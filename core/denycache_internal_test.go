package core

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core/driver"
)

// TestDenyCacheBounded: the deny cache never holds more than its size;
// a full cache drops expired denials first, and a key already held is
// replaced without dropping another.
func TestDenyCacheBounded(t *testing.T) {
	now := time.Now()
	denial := func(retry time.Duration) Decision {
		return Decision{Allowed: false, RetryAfter: retry, Limit: 1}
	}
	for _, size := range []int{1, 5, 64, 100, 1000} {
		c := newDenyCache(size)
		for i := range 50 * size {
			k := fmt.Sprintf("k%d", i)
			c.put(k, 1, now, denial(time.Hour), c.generation(k))
			if got := c.len(); got > size {
				t.Fatalf("size %d: %d entries after %d denials, want at most %d", size, got, i+1, size)
			}
		}
		// Every stripe has been filled by now.
		if got := c.len(); got != size {
			t.Errorf("size %d: %d entries after %d denials, want %d", size, got, 50*size, size)
		}
	}

	// A full stripe drops its expired entries first, else the one that
	// ends soonest.
	st := &denyStripe{m: map[string]*denyEntry{}, max: denySample}
	for i := range denySample {
		until := now.Add(time.Duration(i+1) * time.Hour)
		if i%2 == 0 {
			until = now.Add(-time.Second) // expired
		}
		st.m[fmt.Sprintf("k%d", i)] = &denyEntry{until: until}
	}
	st.makeRoom(now, nil)
	for i := range denySample {
		if _, held := st.m[fmt.Sprintf("k%d", i)]; held != (i%2 == 1) {
			t.Errorf("k%d held = %v after making room, want %v (only the expired dropped)", i, held, i%2 == 1)
		}
	}
	st.makeRoom(now, nil)
	if _, held := st.m["k1"]; held || len(st.m) != denySample/2-1 {
		t.Errorf("after making room among live entries: %d held, k1 held %v; want the soonest (k1) dropped alone", len(st.m), held)
	}

	// Among live entries, the one that counted the fewest refusals goes
	// first, whether handed to the limiter's refusals or not; the one
	// that ends soonest on a tie.
	st = &denyStripe{m: map[string]*denyEntry{}, max: denySample}
	hits := [denySample]int64{5, 4, 9, 2, 6, 8, 3, 7}
	folded := [denySample]int64{1, 1, 0, 1, 0, 1, 0, 0}
	for i := range denySample { // k3 and k6 counted 3 each; k3 ends sooner
		e := &denyEntry{until: now.Add(time.Duration(i+1) * time.Hour)}
		e.hits.Store(hits[i])
		e.folded.Store(folded[i])
		st.m[fmt.Sprintf("k%d", i)] = e
	}
	st.makeRoom(now, nil)
	if _, held := st.m["k3"]; held || len(st.m) != denySample-1 {
		t.Errorf("after making room: %d held, k3 held %v; want the least counted (k3) dropped alone", len(st.m), held)
	}

	// Replacing a key's denial drops nothing else.
	c := newDenyCache(1)
	c.resync() // live
	var d Decision
	c.put("a", 1, now, denial(time.Hour), c.generation("a"))
	c.put("a", 1, now, denial(2*time.Hour), c.generation("a"))
	if !c.get("a", 1, now, false, &d) || d.RetryAfter != 2*time.Hour {
		t.Errorf("get(a) after a replacement = %+v, want the newer denial (RetryAfter 2h)", d)
	}
}

// TestDenyCacheCountsRefusals: an entry counts the store's denial that
// made it and every denial it answers; a replacement for the same key
// keeps the count, a fold hands it to the limiter's refusals, and an
// entry that goes hands over its own.
func TestDenyCacheCountsRefusals(t *testing.T) {
	now := time.Now()
	r := newRefusals(Policy{Name: "p"}, NewMemoryStore(), time.Hour)
	t.Cleanup(func() { r.timer.Stop() })
	c := newDenyCache(1000) // room for both keys, whatever their stripes
	c.refused = r
	c.resync()
	var d Decision
	denial := Decision{RetryAfter: time.Hour}
	c.put("a", 1, now, denial, c.generation("a"))
	for range 3 {
		c.get("a", 1, now, false, &d)
	}
	c.put("a", 1, now, denial, c.generation("a")) // replaced: 4 so far, and 1
	c.get("a", 1, now, false, &d)
	c.put("b", 1, now, denial, c.generation("b"))
	c.remove("b") // gone: hands over its 1
	c.fold(r)
	c.get("a", 1, now, false, &d) // after the fold: the next one's
	var got []driver.RefusedKey
	for i := range r.sk {
		got = r.sk[i].t.drain(got)
	}
	slices.SortFunc(got, func(a, b driver.RefusedKey) int { return strings.Compare(a.Key, b.Key) })
	if want := []driver.RefusedKey{{Key: "a", Refusals: 6}, {Key: "b", Refusals: 1}}; !slices.Equal(got, want) {
		t.Errorf("refusals handed over: %v, want %v", got, want)
	}
	c.fold(r)
	if got := r.sk[0].t.len() + r.sk[1].t.len() + r.sk[2].t.len() + r.sk[3].t.len() +
		r.sk[4].t.len() + r.sk[5].t.len() + r.sk[6].t.len() + r.sk[7].t.len(); got != 1 {
		t.Errorf("after another fold the sketches count %d keys, want 1 (a's last hit)", got)
	}
	if !r.armed.Load() {
		t.Error("refusals counted and no flush armed")
	}
}

// len returns the number of denials held.
func (c *denyCache) len() int {
	n := 0
	for i := range c.entries {
		st := &c.entries[i]
		st.mu.RLock()
		n += len(st.m)
		st.mu.RUnlock()
	}
	return n
}

// TestDenyCacheEpochOfTheCall: a denial is stored under the epoch its
// store call began in. One decided before a resubscription (across which
// a reset's invalidation may have been lost) and put after it does not
// answer while the store does, though it still holds when the store
// fails.
func TestDenyCacheEpochOfTheCall(t *testing.T) {
	now := time.Now()
	denial := func(retry time.Duration) Decision {
		return Decision{RetryAfter: retry}
	}
	c := newDenyCache(10)
	c.resync()
	began := c.generation("k") // the store call begins
	c.resync()                 // the subscription drops and comes back meanwhile
	c.put("k", 1, now, denial(time.Hour), began)
	var d Decision
	if c.get("k", 1, now, false, &d) {
		t.Errorf("a denial decided before a resync answered while the store answers: %+v", d)
	}
	if !c.get("k", 1, now, true, &d) {
		t.Error("a denial decided before a resync did not answer while the store fails")
	}
	// A denial whose call began after the resync answers.
	c.put("j", 1, now, denial(time.Hour), c.generation("j"))
	if !c.get("j", 1, now, false, &d) {
		t.Error("a denial of the current epoch did not answer")
	}
}

// TestDenyCacheLastGone: the entry that answered last, found again
// without the stripe's lock, answers no more once it leaves the cache:
// removed (a reset or refund), pushed out to make room, or replaced by a
// newer denial of the key, which answers instead; nor does it answer
// for another key of its stripe.
func TestDenyCacheLastGone(t *testing.T) {
	now := time.Now()
	denial := func(retry time.Duration) Decision {
		return Decision{Allowed: false, RetryAfter: retry, Limit: 1}
	}
	c := newDenyCache(1) // one stripe of one entry: every key shares it
	c.live.Store(true)
	var d Decision
	c.put("a", 1, now, denial(time.Hour), c.generation("a"))
	if !c.get("a", 1, now, false, &d) || c.entries[0].last.Load() == nil {
		t.Fatal("a: no cached denial, or not kept as the last to answer")
	}
	if c.get("b", 1, now, false, &d) {
		t.Error("b answered by a's denial")
	}

	c.remove("a")
	if c.get("a", 1, now, false, &d) {
		t.Error("a answered after its removal")
	}

	c.put("a", 1, now, denial(time.Hour), c.generation("a"))
	if !c.get("a", 1, now, false, &d) {
		t.Fatal("a: no cached denial after a new put")
	}
	c.put("b", 1, now, denial(time.Hour), c.generation("b")) // pushes a out
	if c.get("a", 1, now, false, &d) {
		t.Error("a answered after it was pushed out")
	}

	if !c.get("b", 1, now, false, &d) || d.RetryAfter != time.Hour {
		t.Fatalf("b = %+v, want its one-hour denial", d)
	}
	c.put("b", 1, now, denial(2*time.Hour), c.generation("b"))
	if !c.get("b", 1, now, false, &d) || d.RetryAfter < time.Hour+59*time.Minute {
		t.Errorf("b after a newer denial = %+v, want the two-hour one", d)
	}
}
