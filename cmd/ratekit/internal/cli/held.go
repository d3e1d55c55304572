package cli

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/internal/redislib"
)

// held is what Redis holds for one key of a policy, read as the store
// wrote it (package core, redis.lua and lease.lua), without the policy's
// rules, which Redis does not hold: the units admitted and when, the
// counts of calendar periods, a lockout, the leases in flight. Times are
// of the decisions' clock, the Redis server's, in µs.
type held struct {
	now        int64   // the server's time when read
	log        []int64 // sliding log: the admission time of each unit, oldest first
	logTTL     time.Duration
	buckets    []bucket // sliding buckets, oldest first
	bucketsTTL time.Duration
	periods    []period // calendar counts, by period start
	lockUntil  int64    // the lockout's end; 0: none
	offences   int64    // the lockout's offences so far
	passUntil  int64    // the end of a passed challenge (core.Rule.Challenge); 0: none
	hashed     bool     // the key's state is in the policy's one hash (":m")
	leases     int64    // leases in flight (not expired)
}

// bucket is one count of the sliding buckets: the units admitted in
// [index*width, (index+1)*width) µs.
type bucket struct {
	width, index, units int64
}

// period is one count of calendar rules: the units admitted in [start,
// end) µs, a day, a week or a month.
type period struct {
	kind       string // "day", "week" or "month"
	start, end int64
	units      int64
}

// empty reports whether Redis holds nothing for the key.
func (h *held) empty() bool {
	return len(h.log) == 0 && len(h.buckets) == 0 && len(h.periods) == 0 && h.lockUntil == 0 && h.passUntil == 0 && h.leases == 0
}

// locked reports whether the key is locked out now, and for how long.
func (h *held) locked() (bool, time.Duration) {
	if h.lockUntil <= h.now {
		return false, 0
	}
	return true, time.Duration(h.lockUntil-h.now) * time.Microsecond
}

// readHeld reads what Redis holds under base, a key's SlidingLog key
// (redisstore.Store.Key), and the other keys of the key beside it: the
// one hash of a policy with a lockout or calendar rules (":m"), and the
// keys of earlier versions (":l", ":c"). On a Cluster they share base's
// slot.
func readHeld(ctx context.Context, rdb redis.UniversalClient, base string) (held, error) {
	var h held
	t, err := rdb.Time(ctx).Result()
	if err != nil {
		return h, err
	}
	h.now = t.UnixMicro()
	var r heldReplies
	_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		r.log, r.logTTL = p.Get(ctx, base), p.PTTL(ctx, base)
		r.buckets, r.bTTL = p.HGetAll(ctx, base+redislib.BucketsSuffix), p.PTTL(ctx, base+redislib.BucketsSuffix)
		r.m, r.mTTL = p.HGetAll(ctx, base+redislib.MoreSuffix), p.PTTL(ctx, base+redislib.MoreSuffix)
		r.cal = p.HGetAll(ctx, base+redislib.CalendarSuffix)
		r.lock = p.Get(ctx, base+redislib.LockoutSuffix)
		r.leases = p.ZCount(ctx, base+redislib.LeaseSuffix, "("+strconv.FormatInt(h.now, 10), "+inf")
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return h, err
	}
	wrongType := h.read(&r, base)
	sort.Slice(h.buckets, func(i, j int) bool {
		return h.buckets[i].index*h.buckets[i].width < h.buckets[j].index*h.buckets[j].width
	})
	sort.Slice(h.periods, func(i, j int) bool { return h.periods[i].start < h.periods[j].start })
	h.leases = r.leases.Val()
	return h, wrongType
}

// heldReplies are the replies of readHeld's pipeline.
type heldReplies struct {
	log        *redis.StringCmd
	logTTL     *redis.DurationCmd
	buckets, m *redis.MapStringStringCmd
	bTTL, mTTL *redis.DurationCmd
	cal        *redis.MapStringStringCmd
	lock       *redis.StringCmd
	leases     *redis.IntCmd
}

// read fills h from r, the replies for the keys of base; it returns an
// error naming a key whose value it could not read, and reads the rest.
func (h *held) read(r *heldReplies, base string) error {
	var wrongType error
	if v, err := r.log.Bytes(); err == nil {
		if h.log, err = parseLog(v); err != nil {
			wrongType = fmt.Errorf("%s: %w", base, err)
		}
		h.logTTL = r.logTTL.Val()
	}
	for f, v := range r.buckets.Val() {
		if err := h.addBucket(f, v); err != nil {
			wrongType = fmt.Errorf("%s:b: %w", base, err)
		}
		h.bucketsTTL = r.bTTL.Val()
	}
	for f, v := range r.cal.Val() {
		if err := h.addPeriod(f, v); err != nil {
			wrongType = fmt.Errorf("%s:c: %w", base, err)
		}
	}
	if v, err := r.lock.Bytes(); err == nil {
		if err := h.setLock(v, 16); err != nil {
			wrongType = fmt.Errorf("%s:l: %w", base, err)
		}
	}
	for f, v := range r.m.Val() {
		h.hashed = true
		if err := h.addMore(f, v, r.mTTL.Val()); err != nil {
			wrongType = fmt.Errorf("%s:m: %w", base, err)
		}
	}
	return wrongType
}

// addMore reads field f of a policy's one hash (see redis.lua): the
// sliding log ('g'), the lockout ('l'), a passed challenge ('p'), a
// calendar period, a bucket, or the key's bookkeeping ('b', 'x'); ttl is
// the hash's.
func (h *held) addMore(f, v string, ttl time.Duration) error {
	switch {
	case f == "g":
		lg, err := parseLog([]byte(v))
		h.log, h.logTTL = lg, ttl
		return err
	case f == "l":
		return h.setLock([]byte(v), 24)
	case f == "p":
		until, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("%q, not the end of a pass", v)
		}
		h.passUntil = until
		return nil
	case f == redislib.BornField || f == "x":
		return nil
	case f[0] >= 'a' && f[0] <= 'z':
		return h.addPeriod(f, v)
	}
	h.bucketsTTL = ttl
	return h.addBucket(f, v)
}

// addBucket reads a field of the sliding buckets.
func (h *held) addBucket(f, v string) error {
	if f == redislib.BornField {
		return nil
	}
	b, err := parseBucket(f, v)
	if err == nil {
		h.buckets = append(h.buckets, b)
	}
	return err
}

// addPeriod reads a field of the calendar counts.
func (h *held) addPeriod(f, v string) error {
	if f == redislib.BornField {
		return nil
	}
	p, err := parsePeriod(f, v)
	if err == nil {
		h.periods = append(h.periods, p)
	}
	return err
}

// setLock reads a lockout of size bytes: when it ends and the offences
// so far (16, an earlier version's ":l"), and when they are forgotten
// (24, the field of the one hash), a lockout forgotten being none.
func (h *held) setLock(v []byte, size int) error {
	if len(v) != size {
		return fmt.Errorf("%d bytes, not a lockout", len(v))
	}
	if size == 24 && int64(double(v[16:24])) <= h.now {
		return nil
	}
	h.lockUntil = int64(double(v[0:8]))
	h.offences = int64(double(v[8:16]))
	return nil
}

// double decodes a little-endian double, as the store's scripts pack them.
func double(b []byte) float64 { return math.Float64frombits(binary.LittleEndian.Uint64(b)) }

// parseLog decodes a sliding log: a header of doubles (the time until
// which its TTL lasts, the number of hints h, h hints), then one
// admission time per unit.
func parseLog(v []byte) ([]int64, error) {
	if len(v) < 16 || len(v)%8 != 0 {
		return nil, fmt.Errorf("%d bytes, not a sliding log", len(v))
	}
	nh := double(v[8:16])
	hdr := 16 + 8*int(nh)
	if nh < 0 || nh > 64 || hdr > len(v) {
		return nil, errors.New("not a sliding log")
	}
	out := make([]int64, 0, (len(v)-hdr)/8)
	for i := hdr; i < len(v); i += 8 {
		out = append(out, int64(double(v[i:i+8])))
	}
	return out, nil
}

// parseBucket decodes a field '<width>:<index>' of the sliding buckets
// and its count.
func parseBucket(f, v string) (bucket, error) {
	w, i, ok := strings.Cut(f, ":")
	width, err1 := strconv.ParseInt(w, 10, 64)
	index, err2 := strconv.ParseInt(i, 10, 64)
	units, err3 := strconv.ParseInt(v, 10, 64)
	if !ok || err1 != nil || err2 != nil || err3 != nil || width <= 0 {
		return bucket{}, fmt.Errorf("field %q is not a bucket", f)
	}
	return bucket{width: width, index: index, units: units}, nil
}

// parsePeriod decodes a field '<kind letter><start>:<end>' of the
// calendar counts and its count.
func parsePeriod(f, v string) (period, error) {
	kinds := map[byte]string{'d': "day", 'w': "week", 'm': "month"}
	var p period
	if f == "" || kinds[f[0]] == "" {
		return p, fmt.Errorf("field %q is not a calendar period", f)
	}
	s, e, ok := strings.Cut(f[1:], ":")
	start, err1 := strconv.ParseInt(s, 10, 64)
	end, err2 := strconv.ParseInt(e, 10, 64)
	units, err3 := strconv.ParseInt(v, 10, 64)
	if !ok || err1 != nil || err2 != nil || err3 != nil {
		return p, fmt.Errorf("field %q is not a calendar period", f)
	}
	return period{kind: kinds[f[0]], start: start, end: end, units: units}, nil
}

// micros returns t µs as a time in UTC, to the second.
func micros(t int64) time.Time { return time.UnixMicro(t).UTC().Truncate(time.Second) }

// ago says how long before h.now the time t is.
func (h *held) ago(t int64) time.Duration { return round(time.Duration(h.now-t) * time.Microsecond) }

// print writes what Redis holds, one line per kind of key.
func (h *held) print(w io.Writer) {
	if h.empty() {
		fmt.Fprintln(w, "Redis holds nothing for it")
		return
	}
	fmt.Fprintln(w, "Redis holds:")
	if n := len(h.log); n > 0 {
		fmt.Fprintf(w, "  sliding log: %s, admitted from %s ago to %s ago; the key expires in %s\n",
			plural(int64(n), "unit"), h.ago(h.log[0]), h.ago(h.log[n-1]), round(h.logTTL))
	}
	if len(h.buckets) > 0 {
		var units int64
		for _, b := range h.buckets {
			units += b.units
		}
		first, last := h.buckets[0], h.buckets[len(h.buckets)-1]
		fmt.Fprintf(w, "  sliding buckets: %s in %s of %s, from %s ago to %s ago; the key expires in %s\n",
			plural(units, "unit"), plural(int64(len(h.buckets)), "bucket"), time.Duration(first.width)*time.Microsecond,
			h.ago(first.index*first.width), h.ago(last.index*last.width), round(h.bucketsTTL))
	}
	for _, p := range h.periods {
		fmt.Fprintf(w, "  calendar %s %s to %s: %s\n", p.kind,
			micros(p.start).Format(time.RFC3339), micros(p.end).Format(time.RFC3339), plural(p.units, "unit"))
	}
	if h.lockUntil > 0 {
		if locked, d := h.locked(); locked {
			fmt.Fprintf(w, "  lockout: until %s (%s from now), offence %d\n", micros(h.lockUntil).Format(time.RFC3339), round(d), h.offences)
		} else {
			fmt.Fprintf(w, "  lockout: ended %s ago; %s remembered\n", h.ago(h.lockUntil), plural(h.offences, "offence"))
		}
	}
	if h.passUntil > h.now {
		fmt.Fprintf(w, "  challenge passed: until %s (%s from now)\n", micros(h.passUntil).Format(time.RFC3339),
			round(time.Duration(h.passUntil-h.now)*time.Microsecond))
	}
	if h.leases > 0 {
		fmt.Fprintf(w, "  in flight: %s\n", plural(h.leases, "lease"))
	}
}

// plural writes n things: "1 unit", "2 units".
func plural(n int64, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return strconv.FormatInt(n, 10) + " " + thing + "s"
}

// heldJSON is what Redis holds, in peek's -json output.
type heldJSON struct {
	// SlidingLog is the admission times of the sliding log's units,
	// oldest first, in RFC 3339 with microseconds.
	SlidingLog []string `json:"sliding_log,omitempty"`
	// Buckets is the units of the sliding buckets.
	Buckets []bucketJSON `json:"buckets,omitempty"`
	// Calendar is the units counted per calendar period.
	Calendar []periodJSON `json:"calendar,omitempty"`
	// LockedUntil is the end of the key's lockout, past or not.
	LockedUntil string `json:"locked_until,omitempty"`
	// Offences is the lockout's offences so far.
	Offences int64 `json:"offences,omitempty"`
	// PassedUntil is the end of the key's passed challenge, while it
	// holds (core.Limiter.Pass).
	PassedUntil string `json:"passed_until,omitempty"`
	// InFlight is the leases in flight.
	InFlight int64 `json:"in_flight,omitempty"`
}

type bucketJSON struct {
	Start string `json:"start"`
	End   string `json:"end"`
	Units int64  `json:"units"`
}

type periodJSON struct {
	Period string `json:"period"`
	Start  string `json:"start"`
	End    string `json:"end"`
	Units  int64  `json:"units"`
}

func (h *held) json() heldJSON {
	ts := func(t int64) string { return time.UnixMicro(t).UTC().Format(time.RFC3339Nano) }
	var out heldJSON
	for _, t := range h.log {
		out.SlidingLog = append(out.SlidingLog, ts(t))
	}
	for _, b := range h.buckets {
		out.Buckets = append(out.Buckets, bucketJSON{Start: ts(b.index * b.width), End: ts((b.index + 1) * b.width), Units: b.units})
	}
	for _, p := range h.periods {
		out.Calendar = append(out.Calendar, periodJSON{Period: p.kind, Start: ts(p.start), End: ts(p.end), Units: p.units})
	}
	if h.lockUntil > 0 {
		out.LockedUntil, out.Offences = micros(h.lockUntil).Format(time.RFC3339), h.offences
	}
	if h.passUntil > h.now {
		out.PassedUntil = micros(h.passUntil).Format(time.RFC3339)
	}
	out.InFlight = h.leases
	return out
}
