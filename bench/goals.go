package main

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// The performance goals, each judged on this run's numbers alone: ratekit
// against its peers (or the ceiling, or a fixed budget) measured in the
// same run.

// verdict is a goal row's outcome.
type verdict int

const (
	unknown verdict = iota // not measured in this run
	met
	notMet
)

func (v verdict) String() string {
	switch v {
	case met:
		return "met"
	case notMet:
		return "**not met**"
	}
	return "not measured"
}

// goalRow is one line of the goals table.
type goalRow struct {
	goal    int    // the goal's number
	name    string // what is measured
	value   string // ratekit's measured value
	peers   string // the peers' values in the same run
	ratio   string // ratekit against the reference, e.g. "1.23× fastest peer"
	target  string
	verdict verdict
	// score is the attainment, ≥ 1 when the goal is met: the ratio over
	// its target for "at least" goals, the target over the value for "at
	// most" ones; NaN when not measured.
	score float64
}

// Goal budgets.
const (
	goalStretch        = 1.5   // × the unpipelined ceiling at the most goroutines
	goalClientAllocs   = 12    // client allocations per Redis decision
	goalMwNs           = 150.0 // middleware ns per allowed request over bare
	goalMwAllocs       = 2     // middleware allocations per allowed request over bare
	goalBytesPerEntry  = 16.0  // Redis bytes per live admission (SlidingLog)
	goalBucketKeyBytes = 2048  // Redis bytes per SlidingBuckets key
	goalDeniedFlood    = 80.0  // × the ceiling, denied flood
	goalOneCallerUs    = 10.0  // client CPU µs per decision over a bare PING, one goroutine
)

// atLeast returns the attainment of v against a lower bound.
func atLeast(v, bound float64) float64 { return v / bound }

// atMost returns the attainment of v against an upper bound: bound / v,
// and for a bound of 0, 1 / (1 + v); values at or below 0 meet any
// positive bound.
func atMost(v, bound float64) float64 {
	switch {
	case bound == 0:
		return 1 / (1 + math.Max(v, 0))
	case v <= 0:
		return math.Inf(1)
	}
	return bound / v
}

func verdictOf(score float64) verdict {
	switch {
	case math.IsNaN(score):
		return unknown
	case score >= 1:
		return met
	}
	return notMet
}

// cellOf returns the cell of the library named name on store for pattern
// p at g goroutines.
func (r *report) cellOf(name, store, pat string, g int) (cell, bool) {
	for _, c := range r.cells {
		if c.lib.name == name && c.lib.store == store && c.pat.name == pat && c.g == g {
			return c, true
		}
	}
	return cell{}, false
}

func (r *report) microOf(name, pat string, parallel bool) (microResult, bool) {
	for _, m := range r.micro {
		if m.lib.name == name && m.pat.name == pat && m.parallel == parallel {
			return m, true
		}
	}
	return microResult{}, false
}

func (r *report) mwOf(name string) (mwResult, bool) {
	for _, m := range r.middleware {
		if m.name == name && m.failed == "" {
			return m, true
		}
	}
	return mwResult{}, false
}

// admittedNote flags a cell of an allowed pattern that was not all
// admitted, or had errors: its throughput is not the allowed path's.
func admittedNote(c cell) string {
	var s []string
	if c.pat.allowed && c.res.ops > 0 && c.res.allowed < c.res.ops*99/100 {
		s = append(s, fmt.Sprintf("only %.1f%% admitted", 100*float64(c.res.allowed)/float64(c.res.ops)))
	}
	if c.res.errs > 0 {
		s = append(s, fmt.Sprintf("%d errors", c.res.errs))
	}
	if len(s) == 0 {
		return ""
	}
	return " (" + strings.Join(s, ", ") + ")"
}

var redisPeers = []string{nameRedisRate, nameUlule}

// patLabel names an allowed pattern in a goal row.
func patLabel(pat string) string {
	switch pat {
	case "hot":
		return "hot key"
	case "10k":
		return "10k keys"
	}
	return pat
}

// goals computes every goal row this run can judge.
func (r *report) goals() []goalRow {
	var rows []goalRow
	maxG := 0
	for _, g := range r.goroutines {
		maxG = max(maxG, g)
	}
	allowedPats := []string{"hot", "10k"}

	// 1. Redis decisions per second against the fastest peer.
	for _, pat := range allowedPats {
		for _, g := range r.goroutines {
			row := goalRow{goal: 1, name: fmt.Sprintf("Redis decisions/s, %s, c=%d", patLabel(pat), g), target: "≥ 1.00× fastest peer", score: math.NaN()}
			rk, ok := r.cellOf(nameRatekit, "redis", pat, g)
			if ok {
				row.value = fmtOps(rk.res.opsPerSec()) + admittedNote(rk)
			}
			best, bestName := 0.0, ""
			var ps []string
			for _, name := range redisPeers {
				if c, ok := r.cellOf(name, "redis", pat, g); ok {
					ps = append(ps, name+" "+fmtOps(c.res.opsPerSec())+admittedNote(c))
					if v := c.res.opsPerSec(); v > best {
						best, bestName = v, name
					}
				}
			}
			row.peers = strings.Join(ps, "; ")
			if ok && best > 0 {
				v := rk.res.opsPerSec() / best
				row.ratio = fmt.Sprintf("%.2f× %s", v, bestName)
				row.score = atLeast(v, 1)
			}
			row.verdict = verdictOf(row.score)
			rows = append(rows, row)
		}
	}
	rows = append(rows, r.p99Rows(allowedPats)...)
	for _, pat := range allowedPats {
		row := goalRow{goal: 1, name: fmt.Sprintf("stretch: Redis decisions/s against the unpipelined EVALSHA ceiling, %s, c=%d", patLabel(pat), maxG),
			target: fmt.Sprintf("≥ %.1f× ceiling", goalStretch), score: math.NaN()}
		ceil := r.ceilingAt(maxG)
		rk, ok := r.cellOf(nameRatekit, "redis", pat, maxG)
		if ok {
			row.value = fmtOps(rk.res.opsPerSec())
		}
		ps := []string{"ceiling " + fmtOps(ceil)}
		for _, name := range redisPeers {
			if c, ok := r.cellOf(name, "redis", pat, maxG); ok {
				ps = append(ps, name+" "+fmtRatio(c.res.opsPerSec(), ceil))
			}
		}
		row.peers = strings.Join(ps, "; ")
		if ok && ceil > 0 {
			v := rk.res.opsPerSec() / ceil
			row.ratio = fmt.Sprintf("%.2f× ceiling", v)
			row.score = atLeast(v, goalStretch)
		}
		row.verdict = verdictOf(row.score)
		rows = append(rows, row)
	}

	// 2. Redis execution time per decision against redis_rate, and
	// client allocations per decision.
	for _, pat := range allowedPats {
		for _, g := range r.goroutines {
			row := goalRow{goal: 2, name: fmt.Sprintf("Redis µs per decision (commandstats), %s, c=%d", patLabel(pat), g), target: "≤ 1.00× " + nameRedisRate, score: math.NaN()}
			rk, ok := r.cellOf(nameRatekit, "redis", pat, g)
			if ok {
				row.value = fmt.Sprintf("%.2f µs", rk.res.redisUsecPerOp())
			}
			var ps []string
			ref := 0.0
			for _, name := range redisPeers {
				if c, ok := r.cellOf(name, "redis", pat, g); ok {
					ps = append(ps, fmt.Sprintf("%s %.2f µs", name, c.res.redisUsecPerOp()))
					if name == nameRedisRate {
						ref = c.res.redisUsecPerOp()
					}
				}
			}
			row.peers = strings.Join(ps, "; ")
			if ok && ref > 0 && rk.res.redisUsecPerOp() > 0 {
				v := rk.res.redisUsecPerOp() / ref
				row.ratio = fmt.Sprintf("%.2f× %s", v, nameRedisRate)
				row.score = atMost(v, 1)
			}
			row.verdict = verdictOf(row.score)
			rows = append(rows, row)
		}
	}
	minG := 0
	if len(r.goroutines) > 0 {
		minG = r.goroutines[0]
		for _, g := range r.goroutines {
			minG = min(minG, g)
		}
	}
	for _, pat := range allowedPats {
		row := goalRow{goal: 2, name: fmt.Sprintf("client allocations per Redis decision, %s, c=%d", patLabel(pat), minG),
			target: fmt.Sprintf("≤ %d", goalClientAllocs), score: math.NaN()}
		rk, ok := r.cellOf(nameRatekit, "redis", pat, minG)
		var ps []string
		ref := 0.0
		for _, name := range redisPeers {
			if c, ok := r.cellOf(name, "redis", pat, minG); ok {
				ps = append(ps, fmt.Sprintf("%s %.1f", name, c.res.allocsPerOp()))
				if name == nameRedisRate {
					ref = c.res.allocsPerOp()
				}
			}
		}
		row.peers = strings.Join(ps, "; ")
		if ok && rk.res.ops > 0 {
			row.value = fmt.Sprintf("%.1f (%.0f B)", rk.res.allocsPerOp(), rk.res.bytesPerOp())
			row.ratio = fmtRatio(rk.res.allocsPerOp(), ref) + " " + nameRedisRate
			row.score = atMost(rk.res.allocsPerOp(), goalClientAllocs)
		}
		row.verdict = verdictOf(row.score)
		rows = append(rows, row)
	}

	// 3. The memory store against x/time/rate, and its allocations.
	memPeers := []string{nameXRate, nameSethvargo, nameUlule}
	for _, pat := range allowedPats {
		row := goalRow{goal: 3, name: fmt.Sprintf("memory store ns/op, RunParallel, %s", patLabel(pat)), target: "≤ 1.00× " + nameXRate, score: math.NaN()}
		rk, ok := r.microOf(nameRatekit, pat, true)
		if ok {
			row.value = fmt.Sprintf("%.1f ns", rk.nsPerOp) + microNote(rk)
		}
		var ps []string
		ref := 0.0
		for _, name := range memPeers {
			if m, ok := r.microOf(name, pat, true); ok {
				ps = append(ps, fmt.Sprintf("%s %.1f ns", name, m.nsPerOp)+microNote(m))
				if name == nameXRate {
					ref = m.nsPerOp
				}
			}
		}
		row.peers = strings.Join(ps, "; ")
		if ok && ref > 0 {
			v := rk.nsPerOp / ref
			row.ratio = fmt.Sprintf("%.2f× %s", v, nameXRate)
			row.score = atMost(v, 1)
		}
		row.verdict = verdictOf(row.score)
		rows = append(rows, row)
	}
	for _, path := range []struct {
		name string
		pats []string
	}{{"allowed", allowedPats}, {"denied", []string{"denied"}}} {
		row := goalRow{goal: 3, name: fmt.Sprintf("memory store allocations per decision, %s path (the more of serial and RunParallel)", path.name),
			target: "0", score: math.NaN()}
		worst := func(name string) (int64, bool) {
			w, found := int64(0), false
			for _, pat := range path.pats {
				for _, par := range []bool{false, true} {
					if m, ok := r.microOf(name, pat, par); ok {
						w, found = max(w, m.allocs), true
					}
				}
			}
			return w, found
		}
		var ps []string
		for _, name := range memPeers {
			if w, ok := worst(name); ok {
				ps = append(ps, fmt.Sprintf("%s %d", name, w))
			}
		}
		row.peers = strings.Join(ps, "; ")
		if w, ok := worst(nameRatekit); ok {
			row.value = fmt.Sprint(w)
			row.ratio = "–"
			row.score = atMost(float64(w), 0)
		}
		row.verdict = verdictOf(row.score)
		rows = append(rows, row)
	}

	// 4. Middleware overhead over the bare handler.
	peerMw := []string{mwUlule, mwHTTPRate, mwTollbooth}
	var peerText []string
	bestPeer, bestPeerName := math.Inf(1), ""
	for _, name := range peerMw {
		if m, ok := r.mwOf(name); ok {
			peerText = append(peerText, fmt.Sprintf("%s +%.0f ns +%d allocs", name, m.overheadNs(), m.overheadAllocs()))
			if m.overheadNs() < bestPeer {
				bestPeer, bestPeerName = m.overheadNs(), name
			}
		}
	}
	for _, name := range []string{mwNethttp, mwGin, mwEcho, mwFiber, mwGRPC} {
		row := goalRow{goal: 4, name: "middleware overhead per allowed request: " + name, peers: "net/http: " + strings.Join(peerText, "; "),
			target: fmt.Sprintf("≤ %.0f ns and ≤ %d allocs over bare", goalMwNs, goalMwAllocs), score: math.NaN()}
		if m, ok := r.mwOf(name); ok {
			row.value = fmt.Sprintf("+%.0f ns, +%d allocs", m.overheadNs(), m.overheadAllocs())
			if bestPeer > 0 && !math.IsInf(bestPeer, 1) {
				row.ratio = fmt.Sprintf("%.2f× %s (ns)", m.overheadNs()/bestPeer, bestPeerName)
			}
			row.score = math.Min(atMost(m.overheadNs(), goalMwNs), atMost(float64(m.overheadAllocs()), goalMwAllocs))
		} else if m, found := r.mwFailed(name); found {
			row.value = "failed: " + m.failed
		}
		row.verdict = verdictOf(row.score)
		rows = append(rows, row)
	}

	// 5. Redis memory.
	var peerKeys []string
	gcra := 0.0
	for _, f := range r.footprints {
		if f.kind == fpPeer {
			peerKeys = append(peerKeys, fmt.Sprintf("%s %d B/key", f.lib, f.bytes))
			if f.lib == nameRedisRate {
				gcra = float64(f.bytes)
			}
		}
	}
	for _, f := range r.footprints {
		switch f.kind {
		case fpLog:
			row := goalRow{goal: 5, name: fmt.Sprintf("SlidingLog bytes per live admission, limit %d", f.limit),
				value:  fmt.Sprintf("%.1f B (%d B key)", f.perEntry, f.bytes),
				peers:  strings.Join(peerKeys, "; "),
				ratio:  fmtRatio(float64(f.bytes), gcra) + " GCRA key",
				target: fmt.Sprintf("≤ %.0f B", goalBytesPerEntry),
				score:  atMost(f.perEntry, goalBytesPerEntry)}
			row.verdict = verdictOf(row.score)
			rows = append(rows, row)
		case fpBuckets:
			name := "SlidingBuckets bytes per key, " + strings.TrimPrefix(f.what, "ratekit SlidingBuckets, ")
			row := goalRow{goal: 5, name: name,
				value:  fmt.Sprintf("%d B", f.bytes),
				peers:  strings.Join(peerKeys, "; "),
				ratio:  fmtRatio(float64(f.bytes), gcra) + " GCRA key",
				target: fmt.Sprintf("≤ %d B", goalBucketKeyBytes),
				score:  atMost(float64(f.bytes), goalBucketKeyBytes)}
			row.verdict = verdictOf(row.score)
			rows = append(rows, row)
		}
	}

	// 6. Keep: a denied flood against the ceiling.
	for _, g := range r.goroutines {
		row := goalRow{goal: 6, name: fmt.Sprintf("denied flood decisions/s against the ceiling, c=%d", g),
			target: fmt.Sprintf("≥ %.0f× ceiling", goalDeniedFlood), score: math.NaN()}
		ceil := r.ceilingAt(g)
		rk, ok := r.cellOf(nameRatekit, "redis", "denied", g)
		if ok {
			row.value = fmtOps(rk.res.opsPerSec()) + admittedNote(rk)
		}
		ps := []string{"ceiling " + fmtOps(ceil)}
		for _, name := range redisPeers {
			if c, ok := r.cellOf(name, "redis", "denied", g); ok {
				ps = append(ps, name+" "+fmtRatio(c.res.opsPerSec(), ceil))
			}
		}
		row.peers = strings.Join(ps, "; ")
		if ok && ceil > 0 {
			v := rk.res.opsPerSec() / ceil
			row.ratio = fmt.Sprintf("%.2f× ceiling", v)
			row.score = atLeast(v, goalDeniedFlood)
		}
		row.verdict = verdictOf(row.score)
		rows = append(rows, row)
	}
	return rows
}

func (r *report) mwFailed(name string) (mwResult, bool) {
	for _, m := range r.middleware {
		if m.name == name && m.failed != "" {
			return m, true
		}
	}
	return mwResult{}, false
}

// microNote flags an in-memory benchmark of an allowed pattern that was
// not all admitted.
func microNote(m microResult) string {
	if m.pat.allowed && m.ops > 0 && m.allowed < m.ops*99/100 {
		return fmt.Sprintf(" (only %.1f%% admitted)", 100*float64(m.allowed)/float64(m.ops))
	}
	return ""
}

// p99Rows judges issue 32's second half of goal 1: in every Redis cell
// of the allowed patterns, ratekit's p99 no longer than that of the
// fastest peer of the cell (the one that decided most per second).
func (r *report) p99Rows(pats []string) []goalRow {
	var rows []goalRow
	for _, pat := range pats {
		for _, g := range r.goroutines {
			row := goalRow{goal: 1, name: fmt.Sprintf("Redis p99 latency, %s, c=%d", patLabel(pat), g), target: "≤ 1.00× the fastest peer's p99", score: math.NaN()}
			rk, ok := r.cellOf(nameRatekit, "redis", pat, g)
			if ok && rk.res.p99 > 0 {
				row.value = fmtDur(rk.res.p99)
			}
			best, bestName, bestP99 := 0.0, "", time.Duration(0)
			var ps []string
			for _, name := range redisPeers {
				if c, found := r.cellOf(name, "redis", pat, g); found && c.res.p99 > 0 {
					ps = append(ps, name+" "+fmtDur(c.res.p99))
					if v := c.res.opsPerSec(); v > best {
						best, bestName, bestP99 = v, name, c.res.p99
					}
				}
			}
			row.peers = strings.Join(ps, "; ")
			if row.value != "" && bestP99 > 0 {
				v := float64(rk.res.p99) / float64(bestP99)
				row.ratio = fmt.Sprintf("%.2f× %s", v, bestName)
				row.score = atMost(v, 1)
			}
			row.verdict = verdictOf(row.score)
			rows = append(rows, row)
		}
	}
	return rows
}
