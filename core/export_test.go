package core

// Exported for the black-box tests of package core_test.
var BoundKey = boundKey

// MaxKeyLen is maxKeyLen, for the black-box tests.
const MaxKeyLen = maxKeyLen

// Len is len, for the black-box tests.
func (s *MemoryStore) Len() int { return s.len() }
