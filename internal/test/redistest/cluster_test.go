package redistest_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/internal/test/redistest"
)

func TestCluster(t *testing.T) {
	start := time.Now()
	c := redistest.StartCluster(t)
	t.Logf("3-master cluster up in %v", time.Since(start))
	if c.Len() != 3 || !slices.Equal(c.Masters(), []int{0, 1, 2}) {
		t.Fatalf("Len() = %d, Masters() = %v, want 3 masters 0-2", c.Len(), c.Masters())
	}
	for i, a := range c.Addrs() {
		if !strings.HasPrefix(a, "127.0.0.1:") || strings.HasSuffix(a, ":6379") {
			t.Errorf("Addrs()[%d] = %q, want a free 127.0.0.1 port other than 6379", i, a)
		}
		info := fmt.Sprint(c.Node(i).Do(t, "CLUSTER", "INFO"))
		for _, want := range []string{"cluster_state:ok", "cluster_slots_ok:16384", "cluster_known_nodes:3", "cluster_size:3"} {
			if !strings.Contains(info, want) {
				t.Errorf("node %d: CLUSTER INFO lacks %s:\n%s", i, want, info)
			}
		}
	}
	for slot, want := range map[int]int{0: 0, 5460: 0, 5461: 1, 10921: 1, 10922: 2, 16383: 2} {
		if got := c.SlotOwner(slot); got != want {
			t.Errorf("SlotOwner(%d) = %d, want %d", slot, got, want)
		}
	}

	ctx := context.Background()
	rdb := c.Client(t)
	// Slot agrees with CLUSTER KEYSLOT, hash tags included.
	for _, key := range []string{
		"", "a", "foo", "123456789", "{user1000}.following", "foo{}{bar}", "foo{{bar}}zap",
		"foo{bar}{zap}", "ratekit:p:{k}", "ratekit:p:{k}:b", "ratekit:p:{}", "ratekit:p:{}x}",
		"\xff\x00{\x80}", strings.Repeat("k", 300),
	} {
		want, err := rdb.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT %q: %v", key, err)
		}
		if got := redistest.Slot(key); int64(got) != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
	// Keys spread over the three masters.
	for i := range 300 {
		if err := rdb.Set(ctx, fmt.Sprintf("k%d", i), i, 0).Err(); err != nil {
			t.Fatalf("SET k%d: %v", i, err)
		}
	}
	for i := range 3 {
		if n, _ := c.Node(i).Do(t, "DBSIZE").(int64); n < 50 {
			t.Errorf("node %d holds %d of 300 keys, want them spread", i, n)
		}
	}

	// A live migration of a slot with 250 keys, in batches.
	const tag = "mig"
	slot := redistest.Slot(tag)
	from := c.SlotOwner(slot)
	to := (from + 1) % 3
	for i := range 250 {
		if err := rdb.Set(ctx, fmt.Sprintf("{%s}:%d", tag, i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	st := c.MigrateSlot(slot, from, to, redistest.MigrateBatch(100))
	t.Logf("migration: %+v", st)
	if st.Keys != 250 || st.Batches != 3 {
		t.Errorf("MigrateSlot moved %d keys in %d batches, want 250 in 3", st.Keys, st.Batches)
	}
	if got := c.SlotOwner(slot); got != to {
		t.Errorf("SlotOwner(%d) after the migration = %d, want %d", slot, got, to)
	}
	if n, _ := c.Node(to).Do(t, "CLUSTER", "COUNTKEYSINSLOT", slot).(int64); n != 250 {
		t.Errorf("node %d holds %d keys of slot %d, want 250", to, n, slot)
	}
	// The client follows MOVED.
	for i := range 250 {
		got, err := rdb.Get(ctx, fmt.Sprintf("{%s}:%d", tag, i)).Int()
		if err != nil || got != i {
			t.Fatalf("GET {%s}:%d after the migration = %d, %v; want %d", tag, i, got, err, i)
		}
	}
	// A restarted node comes back with its identity and slots, empty.
	c.Node(to).Restart()
	start = time.Now()
	c.WaitOK()
	t.Logf("node %d restarted, cluster ok again in %v", to, time.Since(start))
	if got := c.SlotOwner(slot); got != to {
		t.Errorf("SlotOwner(%d) after restarting node %d = %d", slot, to, got)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := rdb.Set(ctx, "{"+tag+"}:after", "v", 0).Err()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("SET on the restarted node: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n, _ := c.Node(to).Do(t, "DBSIZE").(int64); n != 1 {
		t.Errorf("DBSIZE of the restarted node = %d, want 1 (no persistence)", n)
	}
}

func TestClusterReplicasFailover(t *testing.T) {
	start := time.Now()
	c := redistest.StartCluster(t, redistest.WithReplicas())
	t.Logf("3+3 cluster up in %v", time.Since(start))
	if c.Len() != 6 || !slices.Equal(c.Masters(), []int{0, 1, 2}) {
		t.Fatalf("Len() = %d, Masters() = %v, want 6 nodes, masters 0-2", c.Len(), c.Masters())
	}
	ctx := context.Background()
	rdb := c.Client(t)
	slot := redistest.Slot("fo")
	m := c.SlotOwner(slot)
	if err := rdb.Set(ctx, "{fo}", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// WAIT on the master's own connection: the replica has the write.
	if n, _ := c.Node(m).Do(t, "WAIT", 1, 1000).(int64); n != 1 {
		t.Logf("WAIT 1 on master %d = %d (another connection's writes)", m, n)
	}
	start = time.Now()
	r := c.Failover(m)
	t.Logf("failover of node %d to node %d in %v", m, r, time.Since(start))
	if r != m+3 || c.SlotOwner(slot) != r {
		t.Errorf("Failover(%d) = %d, SlotOwner = %d; want node %d", m, r, c.SlotOwner(slot), m+3)
	}
	// The client follows MOVED to the new master; the write is there.
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := rdb.Get(ctx, "{fo}").Result()
		if err == nil && got == "v" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET {fo} after the failover = %q, %v", got, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestKeysWhere(t *testing.T) {
	start := time.Now()
	keys := redistest.KeysWhere(1000, "m", func(slot int) bool { return slot == 16042 })
	t.Logf("1000 keys of one slot in %v", time.Since(start))
	for _, k := range keys {
		if redistest.Slot(k) != 16042 || !strings.HasPrefix(k, "m") {
			t.Fatalf("KeysWhere gave %q (slot %d), want a key of slot 16042", k, redistest.Slot(k))
		}
	}
	if keys[0] == keys[1] {
		t.Fatalf("KeysWhere gave %q twice", keys[0])
	}
}

// TestStartClusterSentinelWithoutRedisServer runs this test binary again
// with an empty PATH: StartCluster and StartSentinel must fail a full run
// with the install hint and skip a -short run, as Start does.
func TestStartClusterSentinelWithoutRedisServer(t *testing.T) {
	switch os.Getenv("REDISTEST_CHILD_START") {
	case "cluster":
		redistest.StartCluster(t)
		t.Log("StartCluster returned")
		return
	case "sentinel":
		redistest.StartSentinel(t)
		t.Log("StartSentinel returned")
		return
	}
	for _, start := range []string{"cluster", "sentinel"} {
		for _, tc := range []struct {
			name     string
			args     []string
			wantFail bool
			want     string
		}{
			{"full run fails", nil, true, redistest.NotFoundMessage},
			{"short run skips", []string{"-test.short"}, false, "SKIP"},
		} {
			t.Run(start+"/"+tc.name, func(t *testing.T) {
				args := append([]string{"-test.run=^TestStartClusterSentinelWithoutRedisServer$", "-test.v"}, tc.args...)
				cmd := exec.Command(os.Args[0], args...)
				cmd.Env = append(os.Environ(), "REDISTEST_CHILD_START="+start, "PATH="+t.TempDir())
				out, err := cmd.CombinedOutput()
				if failed := err != nil; failed != tc.wantFail {
					t.Errorf("child run error = %v, want failed=%v\n%s", err, tc.wantFail, out)
				}
				if !strings.Contains(string(out), tc.want) || strings.Contains(string(out), "returned") {
					t.Errorf("child output does not show %q (or Start returned):\n%s", tc.want, out)
				}
			})
		}
	}
}
