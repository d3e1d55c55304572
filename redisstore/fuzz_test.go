package redisstore_test

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/redisstore"
)

// FuzzRedisKey fuzzes key building: BoundKey and Store.Key for any
// valid policy name and any key. Bounded keys are at most MaxKeyLen bytes:
// the key itself, or else "#" and 43 base64url characters, a hash; a key
// of that shape is hashed too, so that no client can name another's
// hashed key. Redis key names are distinct for distinct (policy, bounded
// key) pairs; and the braces put a key's log, its SlidingBuckets HASH and
// its shards' keys where the hash tag says: the slot of Key(p, k) is the
// slot of "{BoundKey(k)}", whatever the policy (BoundKey hashes a key that
// is empty or starts with "}", which would make an empty hash tag).
func FuzzRedisKey(f *testing.F) {
	f.Add("login", "192.0.2.1", "sms", "+8613800138000")
	f.Add("a:b", "c", "a", "b:{c")
	f.Add("p", "}x", "p", "")
	f.Add("p", "{", "p:{", "}")
	f.Add("p", "a}b{c}", "p", "a}b")
	f.Add("x", strings.Repeat("k", 129), "x", strings.Repeat("k", 128))
	f.Add("p", "#", "p", "#0")
	f.Add("\xff", "\x00{\xff}", "p\x01", "")
	long := strings.Repeat("v", 200)
	f.Add("p", long, "p", driver.BoundKey(long)) // a client that sends another's hash
	// Key names are built without a server: the client never connects.
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	store := redisstore.New(rdb)
	rules := []core.Rule{{Limit: 1, Window: time.Second}}
	f.Fuzz(func(t *testing.T, p1, k1, p2, k2 string) {
		if (core.Policy{Name: p1, Rules: rules}).Validate() != nil {
			return
		}
		b1 := driver.BoundKey(k1)
		if hashed := hashShaped(b1); len(b1) > driver.MaxKeyLen || !hashed && b1 != k1 || b1 == "" || b1[0] == '}' {
			t.Fatalf("BoundKey(%d bytes) = %q (%d bytes), want the key itself up to %d bytes, else a hash", len(k1), b1, len(b1), driver.MaxKeyLen)
		}
		// Keys that would empty the hash tag ("", or starting with '}'),
		// and keys shaped like a hash, are hashed like long ones.
		kept := len(k1) <= driver.MaxKeyLen && k1 != "" && k1[0] != '}' && !hashShaped(k1)
		if kept != (b1 == k1) {
			t.Fatalf("BoundKey(%q) = %q: kept %v, want %v", k1, b1, b1 == k1, kept)
		}
		name := store.Key(p1, k1)
		// Every Redis key of a decision is in the slot of the key's tag.
		slot := redistest.Slot("{" + b1 + "}")
		for _, n := range []string{name, name + ":b", store.Key("other-policy", k1)} {
			if got := redistest.Slot(n); got != slot {
				t.Fatalf("Slot(%q) = %d, want %d, the slot of {%s}", n, got, slot, b1)
			}
		}
		if (core.Policy{Name: p2, Rules: rules}).Validate() != nil {
			return
		}
		b2 := driver.BoundKey(k2)
		if (p1 != p2 || b1 != b2) == (name == store.Key(p2, k2)) {
			t.Fatalf("Key(%q, %q) = %q and Key(%q, %q) = %q", p1, k1, name, p2, k2, store.Key(p2, k2))
		}
		if k1 != k2 && b1 == b2 {
			t.Fatalf("BoundKey(%q) = BoundKey(%q) = %q: two keys share a bucket", k1, k2, b1)
		}
	})
}

// hashShaped reports whether key has the shape of BoundKey's hashes: "#"
// and 43 base64url characters.
func hashShaped(key string) bool {
	if len(key) != 44 || key[0] != '#' {
		return false
	}
	for _, c := range key[1:] {
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '-' && c != '_' {
			return false
		}
	}
	return true
}
