package cli

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/redisstore"
)

// policyCount returns the SLIDINGLOG count that policies printed for
// policy, -1 when the policy is not listed.
func policyCount(stdout, policy string) int {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(policy) + `\s+(\d+)`).FindStringSubmatch(stdout)
	if m == nil {
		return -1
	}
	var n int
	_, _ = fmt.Sscan(m[1], &n)
	return n
}

// TestCluster: against Redis Cluster, REDIS_URL naming one node, the
// command reaches every node: a reset of a key held by another node
// deletes it (no MOVED), peek reads it, and policies counts every node's
// keys.
func TestCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	store := redisstore.New(c.Client(t))
	login := testkit.Limiter(t, store, core.Policy{Name: "login", Rules: []core.Rule{{Limit: 2, Window: time.Hour}}}, appOptions...)
	// Two keys on each master; REDIS_URL names node 0.
	var keys []string
	for _, m := range c.Masters() {
		keys = append(keys, redistest.KeysWhere(2, fmt.Sprintf("user-%d-", m), func(slot int) bool { return c.SlotOwner(slot) == m })...)
	}
	for _, k := range keys {
		lockOut(t, login, k)
	}
	far := redistest.KeysWhere(1, "far-", func(slot int) bool { return c.SlotOwner(slot) != 0 })[0]
	lockOut(t, login, far)

	env := map[string]string{"REDIS_URL": "redis://" + c.Node(0).Addr() + "/0"}
	code, stdout, stderr := execEnv(t, env, "policies")
	want(t, []string{"policies"}, code, 0, stdout+stderr)
	if n := policyCount(stdout, "login"); n != len(keys)+1 {
		t.Errorf("policies counted %d login keys, want %d (every node's):\n%s", n, len(keys)+1, stdout)
	}

	args := []string{"peek", "-policy", "login", "-rules", "2/1h", far}
	code, stdout, stderr = execEnv(t, env, args...)
	want(t, args, code, 0, stdout+stderr, "a request now: denied", "used 2, remaining 0")

	args = []string{"reset", "-policy", "login", far}
	code, stdout, stderr = execEnv(t, env, args...)
	want(t, args, code, 0, stdout+stderr, `reset login "`+far+`": deleted 1 Redis key`)
	if strings.Contains(stderr, "MOVED") {
		t.Errorf("reset: %s", stderr)
	}
	if d, err := login.Allow(context.Background(), far); err != nil || !d.Allowed {
		t.Errorf("after the reset, Allow(%q) = %+v, %v; want allowed", far, d, err)
	}

	// Every node's keys at once.
	args = append([]string{"reset", "-policy", "login"}, keys...)
	code, stdout, stderr = execEnv(t, env, args...)
	want(t, args, code, 0, stdout+stderr)
	if n := strings.Count(stdout, ": deleted 1 Redis key"); n != len(keys) {
		t.Errorf("reset of %d keys on every node deleted %d:\n%s%s", len(keys), n, stdout, stderr)
	}
}

// TestSentinel: against Sentinel, REDIS_URL naming a sentinel, the
// command finds the master, with the master's name in the URL
// (master_name, as go-redis's ParseFailoverURL reads it) or without, when
// the sentinel monitors one master only.
func TestSentinel(t *testing.T) {
	s := redistest.StartSentinel(t)
	rdb := s.FailoverClient(t)
	login := testkit.Limiter(t, redisstore.New(rdb), core.Policy{Name: "login", Rules: []core.Rule{{Limit: 2, Window: time.Hour}}}, appOptions...)
	for _, k := range []string{"alice", "bob", "carol"} {
		lockOut(t, login, k)
	}
	sentinel := s.SentinelAddrs()[0]
	for i, url := range []string{
		"redis://" + sentinel + "?master_name=" + redistest.MasterName,
		"redis://" + sentinel + "/0",
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			env := map[string]string{"REDIS_URL": url}
			code, stdout, stderr := execEnv(t, env, "policies")
			want(t, []string{"policies"}, code, 0, stdout+stderr)
			if n := policyCount(stdout, "login"); n != 3-i {
				t.Errorf("policies counted %d login keys, want %d:\n%s%s", n, 3-i, stdout, stderr)
			}
			key := []string{"alice", "bob"}[i]
			args := []string{"reset", "-policy", "login", key}
			code, stdout, stderr = execEnv(t, env, args...)
			want(t, args, code, 0, stdout+stderr, `reset login "`+key+`": deleted 1 Redis key`)
			if n := rdb.Exists(context.Background(), "ratekit:login:{"+key+"}").Val(); n != 0 {
				t.Errorf("after the reset the master holds %s's key", key)
			}
		})
	}
	// A sentinel URL naming a master the sentinels do not know.
	env := map[string]string{"REDIS_URL": "redis://" + sentinel + "?master_name=nobody"}
	code, _, stderr := execEnv(t, env, "reset", "-timeout", "2s", "-policy", "login", "carol")
	if code != 1 || !strings.Contains(stderr, "nobody") {
		t.Errorf("reset with an unknown master: exit %d, stderr %q; want 1 naming the master", code, stderr)
	}
	if n := rdb.Exists(context.Background(), "ratekit:login:{carol}").Val(); n != 1 {
		t.Errorf("carol's key gone after a failed reset")
	}
}
