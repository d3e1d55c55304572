package memstore

import (
	"time"

	"github.com/ratekit/ratekit/core/driver"
)

// Record adds q.N units to q.Key's windows and calendar periods at the
// store's time, whatever the rules say, and returns that time: the units
// a shared store admitted, mirrored in a limiter's fallback store so that
// a fallback starts from them. The store admitted them within the rules,
// so the key never holds more live units than a rule's limit.
func (p *Policy) Record(q *driver.Query) int64 {
	now := p.store.now()
	sh, h := p.shard(q.Key)
	sh.mu.Lock()
	lg := sh.get(h, q.Key)
	if lg != nil && lg.used > now {
		now = lg.used // keep the key's times in order (see decide)
	}
	if lg == nil && now <= sh.forgot {
		now = sh.forgot + 1 // see decide
	}
	if lg == nil {
		lg = p.insert(sh, h, q.Key, now)
	}
	lg.used = now
	var maxW, maxG int64
	for i, r := range q.Rules {
		if r.Calendar != 0 {
			start, end := r.PeriodMicros(now)
			lg.periodAdd(lg.periodUsed(start, end), now, end, time.Duration(end-start)*time.Microsecond, q.N)
			lg.expires = max(lg.expires, end)
			continue
		}
		maxW = max(maxW, r.Window.Microseconds())
		if q.Algorithm != driver.SlidingBuckets {
			continue
		}
		g := q.BucketWidth(r)
		maxG = max(maxG, g)
		if !sharesWidth(q, i, g) {
			bs := lg.bucketsOf(g, true)
			b := bs.b
			k := 0
			for k < len(b) && b[k].at < (now-longestOfWidth(q, g))/g {
				k++ // out of every window of this width
			}
			bs.b = bucketAdd(append(b[:0], b[k:]...), now/g, q.N)
		}
	}
	if q.Algorithm == driver.SlidingLog && maxW > 0 {
		// Drop what left the longest window, as an evaluation would.
		if c := lg.after(int(lg.head), int(lg.n), now-maxW); c > int(lg.head) {
			lg.head = int32(c)
			lg.compact()
		}
		lg.add(now, q.N)
	}
	lg.expires = max(lg.expires, now+maxW+maxG)
	sh.sweep(now)
	sh.mu.Unlock()
	p.store.shed(now)
	return now
}

// LockFor locks q.Key out for d from now, unless it is locked out longer
// already: a lockout a shared store reported, mirrored in a limiter's
// fallback store.
func (p *Policy) LockFor(q *driver.Query, d time.Duration) {
	now := p.store.now()
	sh, h := p.shard(q.Key)
	sh.mu.Lock()
	lg := sh.get(h, q.Key)
	if lg == nil {
		lg = p.insert(sh, h, q.Key, now)
		lg.used = now
	}
	lg.lock = max(lg.lock, now+d.Microseconds())
	lg.lockKeep = max(lg.lockKeep, lg.lock)
	lg.expires = max(lg.expires, lg.lock)
	sh.mu.Unlock()
	p.store.shed(now)
}

// Lift lifts key's lockout and forgets its pass, if it has them: what
// an instance's fallback store mirrored of a key reset or refunded
// elsewhere. Forgetting a pass can only challenge more.
func (p *Policy) Lift(key string) {
	sh, h := p.shard(key)
	sh.mu.Lock()
	if lg := sh.get(h, key); lg != nil {
		lg.lock, lg.pass = 0, 0
	}
	sh.mu.Unlock()
}
