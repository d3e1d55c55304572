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
// fixed-length hash of it ("#" and the base64url SHA-256 without padding,
// 44 bytes), so that very long user-supplied keys cannot bloat a store.
// The empty key and keys starting with '}' are hashed too: in a Redis key
// "{}" or "{}..." is no hash tag, which would spread one key's data over
// Cluster slots. And so is a key that has the form of a hash: a client
// that sends the hash of another client's long key as its own must not
// spend that client's limit. So BoundKey is meant for keys as a key
// function returns them, once: a hash it returned is no key to bound
// again. Drivers and tools that name a key's store records use it.
func BoundKey(key string) string {
	if len(key) <= MaxKeyLen && key != "" && key[0] != '}' && !hashShaped(key) {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "#" + base64.RawURLEncoding.EncodeToString(sum[:])
}

// boundLen is the length of BoundKey's hashes: "#" and a SHA-256 sum in
// unpadded base64 (base64.RawURLEncoding.EncodedLen, as a constant).
const boundLen = 1 + sha256.Size/3*4 + (sha256.Size%3*8+5)/6

// hashShaped reports whether key has the form of BoundKey's hashes.
func hashShaped(key string) bool {
	if len(key) != boundLen || key[0] != '#' {
		return false
	}
	for _, c := range key[1:] {
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '-' && c != '_' {
			return false
		}
	}
	return true
}
