package guard

// ForgetOneLiners makes the LimitBy functions start afresh, as in a new
// process: ordinals from 1, a new default memory store, no UseStore.
// Tests that call it must not run in parallel with others building
// one-liners.
func ForgetOneLiners() {
	oneLiners.mu.Lock()
	defer oneLiners.mu.Unlock()
	oneLiners.store, oneLiners.memory, oneLiners.onMemory, oneLiners.first, oneLiners.ordinal = nil, nil, 0, "", nil
}
