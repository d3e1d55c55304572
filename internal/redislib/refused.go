package redislib

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratekit/ratekit/core/driver"
)

// The refusals of a policy ([driver.Refusals]) are kept per minute by the
// server's clock, in one sorted set per minute named by RefusedKey: a
// member per key, scored by its count. Adding to a minute's set is one
// transaction (ZINCRBY per key, ZREMRANGEBYRANK down to RefusedKeep
// members, PEXPIRE RefusedTTL); reading is one pipeline of ZRANGE
// WITHSCORES over RefusedMinutes sets, summed here.
const (
	// RefusedKeep is the most keys a minute's set keeps: those with the
	// highest counts.
	RefusedKeep = 1000
	// RefusedMinutes is the number of minutes TopRefused sums: the
	// current one and the five before it.
	RefusedMinutes = 6
	// RefusedTTL is how long a minute's set lives after its last
	// addition: until TopRefused no longer reads it, and a minute more.
	RefusedTTL = (RefusedMinutes + 1) * time.Minute
)

// RefusedKey names the sorted set of policy's refusals in minute (since
// the Unix epoch): <prefix>:<policy>:refused:{<policy>}:<minute>. The
// braces are a Redis Cluster hash tag: the minutes of one policy share a
// slot, so that one transaction adds to a minute and one pipeline reads
// them all. (ParseKey finds no limiter key in it, since it does not end
// in '}' or a suffix of a limiter key.)
func RefusedKey(prefix, policy string, minute int64) string {
	return prefix + ":" + policy + ":refused:{" + policy + "}:" + strconv.FormatInt(minute, 10)
}

// RefusedMinute returns the minute since the Unix epoch of the server's
// time t.
func RefusedMinute(t time.Time) int64 { return t.Unix() / 60 }

// RefusedKeys returns the sets TopRefused reads in minute m: m's and
// those of the minutes before it.
func RefusedKeys(prefix, policy string, m int64) []string {
	keys := make([]string, RefusedMinutes)
	for i := range keys {
		keys[i] = RefusedKey(prefix, policy, m-int64(i))
	}
	return keys
}

// RefusedSum sums the counts of the keys read from several minutes' sets.
type RefusedSum map[string]int64

// Add adds a member of a set and its score.
func (s RefusedSum) Add(member string, score float64) {
	if score >= 1 {
		s[member] += int64(score)
	}
}

// Top returns at most n keys with the highest sums, highest first, ties
// in key order.
func (s RefusedSum) Top(n int) []driver.RefusedKey {
	out := make([]driver.RefusedKey, 0, len(s))
	for k, c := range s {
		out = append(out, driver.RefusedKey{Key: k, Refusals: c})
	}
	slices.SortFunc(out, func(a, b driver.RefusedKey) int {
		return cmp.Or(cmp.Compare(b.Refusals, a.Refusals), strings.Compare(a.Key, b.Key))
	})
	return out[:min(n, len(out))]
}
