package driver

import (
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"testing"
)

// TestBoundLen: the constant length of BoundKey's hashes is what the
// encoding makes, so that hashShaped recognises them.
func TestBoundLen(t *testing.T) {
	if want := 1 + base64.RawURLEncoding.EncodedLen(sha256.Size); boundLen != want {
		t.Fatalf("boundLen = %d, want %d", boundLen, want)
	}
	h := BoundKey(strings.Repeat("k", MaxKeyLen+1))
	if len(h) != boundLen || !hashShaped(h) {
		t.Fatalf("BoundKey(long) = %q (%d bytes), hashShaped %v; want %d bytes, hash-shaped", h, len(h), hashShaped(h), boundLen)
	}
}
