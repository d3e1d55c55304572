package main

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkMemory runs the harness's in-memory cells as go benchmarks, for
// profiling one cell (go test -bench 'Memory/10k/ratekit/parallel'
// -cpuprofile ...): the same setups, keys and goroutine starts as runMicro.
func BenchmarkMemory(b *testing.B) {
	ctx := context.Background()
	for _, p := range patterns() {
		for _, l := range libraries() {
			if l.store != "memory" {
				continue
			}
			for _, mode := range []string{"serial", "parallel"} {
				b.Run(p.name+"/"+benchName(l.name)+"/"+mode, func(b *testing.B) {
					allow, closeFn, err := l.setup(nil, p)
					if err != nil {
						b.Fatal(err)
					}
					defer closeFn()
					keys := p.keys
					if err := touchAll(ctx, allow, keys); err != nil {
						b.Fatal(err)
					}
					b.ReportAllocs()
					b.ResetTimer()
					cpu0 := processCPU()
					defer func() { reportCPU(b, cpu0) }()
					if mode == "serial" {
						i := 0
						for b.Loop() {
							_, _ = allow(ctx, keys[i%len(keys)])
							i++
						}
						return
					}
					var seq atomic.Int64
					b.RunParallel(func(pb *testing.PB) {
						k := int(seq.Add(1)) * 5003
						for pb.Next() {
							_, _ = allow(ctx, keys[k%len(keys)])
							k += 7919
						}
					})
				})
			}
		}
	}
}

// BenchmarkMiddleware runs the harness's middleware cases, bare and
// wrapped, as go benchmarks.
func BenchmarkMiddleware(b *testing.B) {
	for _, c := range middlewareCases() {
		bare, wrapped, err := c.build()
		if err != nil {
			b.Fatal(err)
		}
		for _, side := range []struct {
			name  string
			serve func() int
		}{{"bare", bare}, {"wrapped", wrapped}} {
			b.Run(benchName(c.name)+"/"+side.name, func(b *testing.B) {
				b.ReportAllocs()
				cpu0 := processCPU()
				defer func() { reportCPU(b, cpu0) }()
				for b.Loop() {
					if side.serve() != 200 {
						b.Fatal("not 200")
					}
				}
			})
		}
	}
}

// benchName makes a library's name one element of a benchmark's name.
func benchName(s string) string { return strings.NewReplacer("/", "_", " ", "_").Replace(s) }

// reportCPU reports the process's CPU time per operation since cpu0
// (cpu-ns/op): on a machine shared with other work, a steadier measure
// than the wall clock's ns/op, which counts the time other processes ran.
// With RunParallel it is the CPU of all the goroutines, about GOMAXPROCS
// times ns/op on an idle machine.
func reportCPU(b *testing.B, cpu0 time.Duration) {
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
}
