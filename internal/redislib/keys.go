package redislib

import "strings"

// DefaultPrefix is the prefix of every key a driver writes unless it is
// told another.
const DefaultPrefix = "ratekit"

// Key returns the Redis key of the windows of policy's bounded key under
// SlidingLog: <prefix>:<policy>:{<key>}. The braces are a Redis Cluster
// hash tag: every key of one (policy, key) lives in one slot. Under
// SlidingBuckets the key has ":b" appended. A policy with a lockout or
// calendar rules keeps all of a key in one hash, ":m" appended (earlier
// versions kept a lockout under ":l" and calendar counts under ":c",
// which a decision moves into it); leases are under ":lease".
func Key(prefix, policy, bounded string) string {
	return prefix + ":" + policy + ":{" + bounded + "}"
}

// Suffixes of the keys of one (policy, key) beside its log.
const (
	BucketsSuffix = ":b"
	MoreSuffix    = ":m"
	LeaseSuffix   = ":lease"

	// Suffixes of the keys of earlier versions, moved into MoreSuffix's
	// by the first decision that finds them.
	LockoutSuffix  = ":l"
	CalendarSuffix = ":c"
)

// BornField is the field of the buckets and calendar hashes that holds
// the time, in µs, the key was made: a refund of a decision made before
// it does nothing, the key having been reset since.
const BornField = "b"

// AllKeys returns every Redis key of policy's bounded key, for a reset.
func AllKeys(prefix, policy, bounded string) []string {
	k := Key(prefix, policy, bounded)
	return []string{k, k + BucketsSuffix, k + MoreSuffix, k + LeaseSuffix, k + LockoutSuffix, k + CalendarSuffix}
}

// FleetKey names the sorted set of the instances that use policy.
func FleetKey(prefix, policy string) string { return prefix + ":" + policy + ":fleet" }

// Channel is the pub/sub channel of invalidations under prefix.
func Channel(prefix string) string { return prefix + ":invalidate" }

// Suffixes of the messages on the invalidation channel beside the Redis
// key of a refund or reset: a tier invalidation, a reset (published with
// the plain message, which releases before it understand), a pass. (An
// invalidation of denials ends in "}", "}:b" or "}:m", so a watcher that
// knows no such messages, v0.1.0's, ignores these.)
const (
	TierSuffix  = ":tier"
	ResetSuffix = ":reset"
	PassSuffix  = ":pass"
)

// ParseKey splits a Redis key <prefix>:<policy>:{<key>}[:b|:m] into its
// policy and bounded key.
func ParseKey(prefix, rk string) (policy, key string, ok bool) {
	rest, ok := strings.CutPrefix(rk, prefix+":")
	if !ok {
		return "", "", false
	}
	policy, rest, ok = strings.Cut(rest, ":{") // policy names hold no '{'
	if !ok {
		return "", "", false
	}
	if r, found := strings.CutSuffix(rest, BucketsSuffix); found {
		rest = r
	} else {
		rest = strings.TrimSuffix(rest, MoreSuffix)
	}
	key, ok = strings.CutSuffix(rest, "}")
	return policy, key, ok
}

// Slot returns the Redis Cluster hash slot of key: of its hash tag, the
// part between the first '{' and the next '}', when it has a nonempty
// one, else of the whole key.
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key) % 16384)
}

// KeySlot returns Slot(Key(prefix, policy, bounded)) without building the
// key when prefix holds no '{'.
func KeySlot(prefix, policy, bounded string) int {
	if strings.IndexByte(prefix, '{') >= 0 {
		return Slot(Key(prefix, policy, bounded))
	}
	tag := bounded
	if j := strings.IndexByte(tag, '}'); j >= 0 {
		tag = tag[:j]
	}
	if tag == "" {
		return Slot(Key(prefix, policy, bounded))
	}
	return int(crc16(tag) % 16384)
}

// crc16 is CRC-16/XMODEM, the hash of Redis Cluster slots.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
