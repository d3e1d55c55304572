package main

import (
	"context"
	"math"
	"math/bits"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// allowFunc decides one request for key and reports whether it was
// admitted. Every library is driven through one.
type allowFunc func(ctx context.Context, key string) (bool, error)

// result is what one cell of the matrix measured.
type result struct {
	ops      int64         // decisions completed in the measured window
	allowed  int64         // of which admitted
	errs     int64         // errors (and, for ratekit, fallback decisions)
	elapsed  time.Duration // length of the measured window
	p50, p99 time.Duration // latency of one decision, sampled
	// mallocs and allocBytes are the process's heap allocations in the
	// measured window (runtime.MemStats): the library's, since the
	// harness's loop allocates nothing.
	mallocs, allocBytes uint64
	// clientCPU is the process's user + system CPU time in the measured
	// window (getrusage): the library's client work and the harness's
	// loop, which is the same for every library.
	clientCPU time.Duration
	// redis is what Redis spent in the measured window (Redis-backed
	// cells only).
	redis redisCost
	// medianOps, when set, is the median decisions/s of the rounds a
	// result merges (see mergeRounds): its throughput.
	medianOps float64
}

// allocsPerOp returns heap allocations per decision.
func (r result) allocsPerOp() float64 { return perOp(float64(r.mallocs), r.ops) }

// bytesPerOp returns heap bytes allocated per decision.
func (r result) bytesPerOp() float64 { return perOp(float64(r.allocBytes), r.ops) }

// redisUsecPerOp returns Redis's execution time (INFO commandstats, every
// command of the library) per decision, µs.
func (r result) redisUsecPerOp() float64 { return perOp(r.redis.allUsec, r.ops) }

// redisCPUPerOp returns the Redis process's CPU time per decision, µs.
func (r result) redisCPUPerOp() float64 { return perOp(r.redis.cpuUsec, r.ops) }

// clientCPUPerOp returns the process's CPU time per decision, µs.
func (r result) clientCPUPerOp() float64 {
	return perOp(float64(r.clientCPU.Nanoseconds())/1000, r.ops)
}

// processCPU returns the process's user + system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// callsPerOp returns script calls per decision (below 1 when calls carry
// batches).
func (r result) callsPerOp() float64 { return perOp(r.redis.scriptCalls, r.ops) }

func perOp(v float64, ops int64) float64 {
	if ops <= 0 {
		return 0
	}
	return v / float64(ops)
}

// probe reads counters at the start and the end of a measured window.
type probe interface {
	start(ctx context.Context)
	stop(ctx context.Context)
}

// opsPerSec returns the throughput of r.
func (r result) opsPerSec() float64 {
	if r.medianOps > 0 {
		return r.medianOps
	}
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.ops) / r.elapsed.Seconds()
}

// Phases of a run: workers count operations only while measuring.
const (
	phaseWarm int32 = iota
	phaseMeasure
	phaseStop
)

// worker is one goroutine's counters, padded so that workers do not share
// cache lines.
type worker struct {
	ops, allowed, errs int64
	hist               histogram
	_                  [64]byte
}

// measure drives allow from g goroutines over keys for warm (not counted)
// and then dur (counted). Each goroutine picks keys with its own
// xorshift generator. Latency is sampled on one decision in sampleEvery,
// so that reading the clock does not dominate in-memory decisions. The
// probes run at the start and the end of the measured window, and the
// process's heap allocations are counted over it.
func measure(ctx context.Context, allow allowFunc, keys []string, g int, warm, dur time.Duration, sampleEvery uint64, probes ...probe) result {
	var phase atomic.Int32
	workers := make([]worker, g)
	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		go func(w *worker, seed uint64) {
			defer wg.Done()
			x := seed*0x9E3779B97F4A7C15 | 1
			nkeys := uint64(len(keys))
			for n := uint64(0); ; n++ {
				p := phase.Load()
				if p == phaseStop {
					return
				}
				key := keys[0]
				if nkeys > 1 {
					x ^= x << 13
					x ^= x >> 7
					x ^= x << 17
					key = keys[x%nkeys]
				}
				sample := p == phaseMeasure && n%sampleEvery == 0
				var t0 time.Time
				if sample {
					t0 = time.Now()
				}
				ok, err := allow(ctx, key)
				if p != phaseMeasure {
					continue
				}
				if sample {
					w.hist.add(time.Since(t0))
				}
				w.ops++
				switch {
				case err != nil:
					w.errs++
				case ok:
					w.allowed++
				}
			}
		}(&workers[i], uint64(i)+1)
	}
	sleepCtx(ctx, warm)
	for _, p := range probes {
		p.start(ctx)
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	cpu0 := processCPU()
	start := time.Now()
	phase.Store(phaseMeasure)
	sleepCtx(ctx, dur)
	phase.Store(phaseStop)
	elapsed := time.Since(start)
	cpu1 := processCPU()
	runtime.ReadMemStats(&m1)
	for _, p := range probes {
		p.stop(ctx)
	}
	wg.Wait()

	r := result{mallocs: m1.Mallocs - m0.Mallocs, allocBytes: m1.TotalAlloc - m0.TotalAlloc, clientCPU: cpu1 - cpu0}
	var h histogram
	for i := range workers {
		w := &workers[i]
		r.ops += w.ops
		r.allowed += w.allowed
		r.errs += w.errs
		h.merge(&w.hist)
	}
	r.elapsed = elapsed
	r.p50 = h.quantile(0.50)
	r.p99 = h.quantile(0.99)
	return r
}

// sleepCtx sleeps for d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// histogram counts durations in log-linear buckets: 32 per power of two,
// so a quantile is within about 3% of the true value.
type histogram struct {
	counts [histBuckets]uint64
	total  uint64
}

const (
	subBits     = 5
	subBuckets  = 1 << subBits
	histBuckets = (64 - subBits + 1) * subBuckets
)

// bucketOf returns the bucket of v nanoseconds.
func bucketOf(v uint64) int {
	if v < subBuckets {
		return int(v)
	}
	e := bits.Len64(v) - subBits // at least 1
	return (e-1)*subBuckets + int(v>>(e-1))
}

// bucketRange returns the smallest value of bucket i and the bucket's width.
func bucketRange(i int) (lo, width uint64) {
	if i < 2*subBuckets {
		return uint64(i), 1
	}
	e := i / subBuckets
	m := uint64(i - (e-1)*subBuckets)
	return m << (e - 1), 1 << (e - 1)
}

func (h *histogram) add(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[bucketOf(uint64(d))]++
	h.total++
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.total += o.total
}

// quantile returns the q-quantile (0 < q ≤ 1) by nearest rank: the middle
// of the bucket that holds it; 0 for an empty histogram.
func (h *histogram) quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.total))) // nearest rank
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, w := bucketRange(i)
			return time.Duration(lo + w/2)
		}
	}
	return 0
}

// mergeRounds merges the results of rounds of one cell: decisions/s, p50
// and p99 are the medians of the rounds' (so that one disturbed round
// does not decide a verdict), and the counts (decisions, allocations,
// CPU, Redis's time) are summed, so that the per-decision costs are
// those of all the rounds.
func mergeRounds(rounds []result) result {
	var m result
	if len(rounds) == 0 {
		return m
	}
	ops := make([]float64, len(rounds))
	p50 := make([]time.Duration, len(rounds))
	p99 := make([]time.Duration, len(rounds))
	for i, r := range rounds {
		m.ops += r.ops
		m.allowed += r.allowed
		m.errs += r.errs
		m.elapsed += r.elapsed
		m.mallocs += r.mallocs
		m.allocBytes += r.allocBytes
		m.clientCPU += r.clientCPU
		m.redis.scriptCalls += r.redis.scriptCalls
		m.redis.scriptUsec += r.redis.scriptUsec
		m.redis.allUsec += r.redis.allUsec
		m.redis.cpuUsec += r.redis.cpuUsec
		ops[i], p50[i], p99[i] = r.opsPerSec(), r.p50, r.p99
	}
	m.medianOps = median(ops)
	m.p50, m.p99 = median(p50), median(p99)
	return m
}

// median returns the median of vs (the mean of the middle two for an
// even count); vs is sorted in place.
func median[T ~int64 | ~float64](vs []T) T {
	slices.Sort(vs)
	n := len(vs)
	if n%2 == 1 {
		return vs[n/2]
	}
	return (vs[n/2-1] + vs[n/2]) / 2
}
