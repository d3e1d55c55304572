package driver

import (
	"crypto/sha256"
	"encoding/base64"
)

// MaxKeyLen is the longest key a limiter hands its store as it is; longer
// keys are replaced by a fixed-length hash of themselves ([BoundKey]).
const MaxKeyLen = 128

// BoundKey returns key as a limiter hands it to its store, in [Query].Key:
// unchanged when it is at most [MaxKeyLen] bytes, and otherwise a
// fixed-length hash of it ("#" and the base64url SHA-256 without padding),
// so that very long user-supplied keys cannot bloat a store. The empty key
// and keys starting with '}' are hashed too: in a Redis key "{}" or "{}..."
// is no hash tag, which would spread one key's data over Cluster slots.
// Drivers and tools that name a key's store records use it.
func BoundKey(key string) string {
	if len(key) <= MaxKeyLen && key != "" && key[0] != '}' {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "#" + base64.RawURLEncoding.EncodeToString(sum[:])
}
