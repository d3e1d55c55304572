package redisstore_test

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/internal/redistest"
	"github.com/ratekit/ratekit/redisstore"
)

// FuzzRedisKey fuzzes key building: BoundKey and Store.Key for any
// valid policy name and any key. Bounded keys are at most MaxKeyLen bytes
// (a fixed point of BoundKey); Redis key names are distinct for distinct
// (policy, bounded key) pairs; and the braces put a key's log, its
// SlidingBuckets HASH and its shards' keys where the hash tag says: the
// slot of Key(p, k) is the slot of "{k}", whatever the policy, unless k is
// empty or starts with "}" (an empty hash tag: then the whole name is
// hashed, and Store.Reset deletes the two names one by one).
func FuzzRedisKey(f *testing.F) {
	f.Add("login", "192.0.2.1", "sms", "+8613800138000")
	f.Add("a:b", "c", "a", "b:{c")
	f.Add("p", "}x", "p", "")
	f.Add("p", "{", "p:{", "}")
	f.Add("p", "a}b{c}", "p", "a}b")
	f.Add("x", strings.Repeat("k", 129), "x", strings.Repeat("k", 128))
	f.Add("p", "#", "p", "#0")
	f.Add("\xff", "\x00{\xff}", "p\x01", "")
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
		// Keys that would empty the hash tag ("", or starting with '}')
		// are hashed like long ones.
		kept := len(k1) <= driver.MaxKeyLen && k1 != "" && k1[0] != '}'
		if len(b1) > driver.MaxKeyLen || kept != (b1 == k1) || driver.BoundKey(b1) != b1 || b1 == "" || b1[0] == '}' {
			t.Fatalf("BoundKey(%d bytes) = %q (%d bytes), want the key itself up to %d bytes (unless empty or starting with '}'), else a fixed-length hash",
				len(k1), b1, len(b1), driver.MaxKeyLen)
		}
		name := store.Key(p1, b1)
		// Every Redis key of a decision is in the slot of the key's tag.
		slot := redistest.Slot("{" + b1 + "}")
		for _, n := range []string{name, name + ":b", store.Key("other-policy", b1)} {
			if got := redistest.Slot(n); got != slot {
				t.Fatalf("Slot(%q) = %d, want %d, the slot of {%s}", n, got, slot, b1)
			}
		}
		if (core.Policy{Name: p2, Rules: rules}).Validate() != nil {
			return
		}
		b2 := driver.BoundKey(k2)
		if (p1 != p2 || b1 != b2) == (name == store.Key(p2, b2)) {
			t.Fatalf("Key(%q, %q) = %q and Key(%q, %q) = %q", p1, b1, name, p2, b2, store.Key(p2, b2))
		}
	})
}
