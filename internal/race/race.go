//go:build race

package race

// Enabled reports whether the race detector is on: it changes allocation
// counts (sync.Pool drops items at random), so tests that count
// allocations skip then.
const Enabled = true
