//go:build !race

// Package race tells tests whether the race detector is on.
package race

// Enabled reports whether the race detector is on: it changes allocation
// counts (sync.Pool drops items at random), so tests that count
// allocations skip then.
const Enabled = false
