package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SlotCount is the number of hash slots of a Redis Cluster.
const SlotCount = 16384

// clusterTimeout bounds how long [StartCluster], [Cluster.WaitOK],
// [Cluster.MigrateSlot] and [Cluster.Failover] wait for the cluster to
// agree. Forming a cluster takes about a second; the rest is room for a
// loaded machine.
const clusterTimeout = 30 * time.Second

// ClusterOption configures a [Cluster].
type ClusterOption func(*clusterConfig)

type clusterConfig struct {
	replicas    bool
	nodeTimeout time.Duration
	args        []string
}

// WithReplicas gives each of the three masters one replica.
func WithReplicas() ClusterOption {
	return func(c *clusterConfig) { c.replicas = true }
}

// WithNodeTimeout sets the nodes' cluster-node-timeout, after which an
// unreachable node is marked as failing (and a replica may take over its
// slots); 3 s by default.
func WithNodeTimeout(d time.Duration) ClusterOption {
	return func(c *clusterConfig) { c.nodeTimeout = d }
}

// WithClusterArgs passes extra command-line configuration to every node,
// after the defaults.
func WithClusterArgs(args ...string) ClusterOption {
	return func(c *clusterConfig) { c.args = append(c.args, args...) }
}

// Cluster is a Redis Cluster of real redis-server processes on loopback,
// started by [StartCluster]: three masters that split the 16384 slots in
// equal ranges, and optionally one replica each. Nodes 0-2 are the
// masters as formed, nodes 3-5 (with [WithReplicas]) the replicas of
// nodes 0-2; a [Cluster.Failover] swaps those roles.
//
// Methods that fail report to the testing.TB given to StartCluster: call
// them from that test's goroutine, or use [Cluster.For] in a subtest. Addrs, Len, Node and ID are safe for
// concurrent use.
type Cluster struct {
	t     testing.TB
	nodes []*Server
	ids   []string
}

// StartCluster starts three masters (six nodes with [WithReplicas]) at
// once, each with --cluster-enabled yes, its own cluster config file, no
// persistence and a cluster bus on a second free port; forms the cluster
// (CLUSTER SET-CONFIG-EPOCH, ADDSLOTSRANGE, MEET, REPLICATE); and waits
// until every node answers cluster_state:ok with all slots covered, every
// node sees the same slot owners, and every replica is in sync. It
// registers cleanups that stop every node.
//
// Like [Start], it skips the test with -short and fails it when
// redis-server is not on PATH.
func StartCluster(t testing.TB, opts ...ClusterOption) *Cluster {
	t.Helper()
	cfg := clusterConfig{nodeTimeout: 3 * time.Second}
	for _, opt := range opts {
		opt(&cfg)
	}
	n := 3
	if cfg.replicas {
		n = 6
	}
	nodes := startMany(t, n, func(i int, dir string) ([]string, error) {
		bus, err := freePort()
		if err != nil {
			return nil, err
		}
		args := []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-port", strconv.Itoa(bus),
			"--cluster-node-timeout", strconv.FormatInt(cfg.nodeTimeout.Milliseconds(), 10),
			// A replica's first sync must not wait for more replicas.
			"--repl-diskless-sync-delay", "0",
		}
		return append(args, cfg.args...), nil
	})
	c := &Cluster{t: t, nodes: nodes, ids: make([]string, n)}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	if err := c.form(ctx, cfg.replicas); err != nil {
		t.Fatalf("redistest: form cluster: %v", err)
	}
	return c
}

func (c *Cluster) form(ctx context.Context, replicas bool) error {
	for i, s := range c.nodes {
		id, err := c.do(ctx, s, "CLUSTER", "MYID")
		if err != nil {
			return err
		}
		c.ids[i] = fmt.Sprint(id)
		// Distinct epochs from the start: no collision to resolve.
		if _, err := c.do(ctx, s, "CLUSTER", "SET-CONFIG-EPOCH", i+1); err != nil {
			return err
		}
	}
	for i := range 3 {
		lo, hi := i*SlotCount/3, (i+1)*SlotCount/3-1
		if _, err := c.do(ctx, c.nodes[i], "CLUSTER", "ADDSLOTSRANGE", lo, hi); err != nil {
			return err
		}
	}
	for _, s := range c.nodes[1:] {
		host, port, bus := s.busAddr()
		if _, err := c.do(ctx, c.nodes[0], "CLUSTER", "MEET", host, port, bus); err != nil {
			return err
		}
	}
	// Everyone must know everyone before a replica can name its master.
	if err := c.pollUntil(ctx, "every node to know every other", func() error {
		for i, s := range c.nodes {
			tab, err := c.table(ctx, s)
			if err != nil {
				return err
			}
			if len(tab) != len(c.nodes) {
				return fmt.Errorf("node %d knows %d nodes", i, len(tab))
			}
			for _, e := range tab {
				if e.has("handshake") || e.has("noaddr") {
					return fmt.Errorf("node %d sees %s as %s", i, e.addr, strings.Join(e.flags, ","))
				}
			}
		}
		return nil
	}); err != nil {
		return err
	}
	if replicas {
		for i := 3; i < 6; i++ {
			if _, err := c.do(ctx, c.nodes[i], "CLUSTER", "REPLICATE", c.ids[i-3]); err != nil {
				return err
			}
		}
	}
	return c.waitOK(ctx)
}

// For returns a view of the cluster whose methods report failures to t
// instead of the test that started it: use it in subtests, which must not
// fail their parent. The nodes' own methods ([Server.Stop], ...) still
// report to the test that started the cluster.
func (c *Cluster) For(t testing.TB) *Cluster {
	cc := *c
	cc.t = t
	return &cc
}

// Len returns the number of nodes.
func (c *Cluster) Len() int { return len(c.nodes) }

// Node returns node i, for Stop, Restart, Pause, Do and Addr. Restart
// brings a node back with its cluster identity (its config file) but no
// data; call [Cluster.WaitOK] after it.
func (c *Cluster) Node(i int) *Server { return c.nodes[i] }

// ID returns the cluster node ID of node i.
func (c *Cluster) ID(i int) string { return c.ids[i] }

// Addrs returns the address of every node, for redis.ClusterOptions.Addrs.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.nodes))
	for i, s := range c.nodes {
		out[i] = s.Addr()
	}
	return out
}

// Client returns a go-redis cluster client on every node built with
// default options, closed when t ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// WaitOK waits until every running node answers cluster_state:ok with all
// slots assigned and ok, every node sees the same owner for every slot and
// no node as failing, and every replica's link to its master is up.
func (c *Cluster) WaitOK() {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	if err := c.waitOK(ctx); err != nil {
		c.t.Fatalf("redistest: %v", err)
	}
}

func (c *Cluster) waitOK(ctx context.Context) error {
	return c.pollUntil(ctx, "cluster_state:ok on every node", func() error {
		var want string
		for i, s := range c.nodes {
			if !s.running() {
				continue
			}
			info, err := c.info(ctx, s, "CLUSTER", "INFO")
			if err != nil {
				return fmt.Errorf("node %d: %w", i, err)
			}
			for k, v := range map[string]string{
				"cluster_state":          "ok",
				"cluster_slots_assigned": strconv.Itoa(SlotCount),
				"cluster_slots_ok":       strconv.Itoa(SlotCount),
			} {
				if info[k] != v {
					return fmt.Errorf("node %d: %s:%s", i, k, info[k])
				}
			}
			tab, err := c.table(ctx, s)
			if err != nil {
				return fmt.Errorf("node %d: %w", i, err)
			}
			view := tab.ownership()
			if want == "" {
				want = view
			} else if view != want {
				return fmt.Errorf("node %d sees slot owners and replicas %s, another node %s", i, view, want)
			}
			for _, e := range tab {
				if e.has("fail") || e.has("fail?") {
					return fmt.Errorf("node %d sees %s as %s", i, e.addr, strings.Join(e.flags, ","))
				}
			}
			if me := tab.self(); me != nil && me.has("slave") {
				repl, err := c.info(ctx, s, "INFO", "replication")
				if err != nil {
					return fmt.Errorf("node %d: %w", i, err)
				}
				if repl["master_link_status"] != "up" {
					return fmt.Errorf("replica node %d: master_link_status:%s", i, repl["master_link_status"])
				}
			}
		}
		return nil
	})
}

// SlotOwner returns the index of the node that serves slot, as the first
// running node sees it.
func (c *Cluster) SlotOwner(slot int) int {
	c.t.Helper()
	for _, e := range c.firstTable() {
		if e.owns(slot) {
			return slices.Index(c.ids, e.id)
		}
	}
	c.t.Fatalf("redistest: no node serves slot %d", slot)
	return -1
}

// Masters returns the indexes of the nodes that are masters now, as the
// first running node sees it.
func (c *Cluster) Masters() []int {
	c.t.Helper()
	var out []int
	for _, e := range c.firstTable() {
		if e.has("master") {
			out = append(out, slices.Index(c.ids, e.id))
		}
	}
	slices.Sort(out)
	return out
}

// firstTable returns the node table as the first running node sees it.
func (c *Cluster) firstTable() nodeTable {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	for _, s := range c.nodes {
		if !s.running() {
			continue
		}
		tab, err := c.table(ctx, s)
		if err != nil {
			c.t.Fatalf("redistest: %v", err)
		}
		return tab
	}
	c.t.Fatal("redistest: no node is running")
	return nil
}

// MigrateOption configures a [Cluster.MigrateSlot].
type MigrateOption func(*migrateConfig)

type migrateConfig struct {
	batch  int
	pause  time.Duration
	opened func()
}

// MigrateBatch sets how many keys one MIGRATE moves; 100 by default.
func MigrateBatch(n int) MigrateOption {
	return func(c *migrateConfig) { c.batch = n }
}

// MigratePause makes MigrateSlot wait d between batches, so that a
// migration of a few keys lasts long enough for clients to meet it half
// done; no pause by default.
func MigratePause(d time.Duration) MigrateOption {
	return func(c *migrateConfig) { c.pause = d }
}

// MigrateOpened makes MigrateSlot call f once the slot is open
// (IMPORTING on the target, MIGRATING on the source) and before the
// first key moves: what clients meet between the first step of a reshard
// and the next.
func MigrateOpened(f func()) MigrateOption {
	return func(c *migrateConfig) { c.opened = f }
}

// MigrateStats is what a [Cluster.MigrateSlot] did.
type MigrateStats struct {
	// Keys is the number of keys moved.
	Keys int
	// Batches is the number of MIGRATE commands.
	Batches int
	// Duration is how long the migration took, from SETSLOT IMPORTING to
	// the last SETSLOT NODE.
	Duration time.Duration
}

// MigrateSlot moves slot from node from to node to, live, the way
// redis-cli --cluster reshard does: CLUSTER SETSLOT IMPORTING on the
// target, MIGRATING on the source, MIGRATE of the slot's keys in batches
// (clients meet ASK redirects for the keys already moved), then SETSLOT
// NODE on the target, the source and every other master (clients meet
// MOVED from then on). It waits until every node sees the new owner.
func (c *Cluster) MigrateSlot(slot, from, to int, opts ...MigrateOption) MigrateStats {
	c.t.Helper()
	cfg := migrateConfig{batch: 100}
	for _, opt := range opts {
		opt(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	st, err := c.migrate(ctx, slot, from, to, cfg)
	if err != nil {
		c.t.Fatalf("redistest: migrate slot %d from node %d to node %d: %v", slot, from, to, err)
	}
	return st
}

func (c *Cluster) migrate(ctx context.Context, slot, from, to int, cfg migrateConfig) (MigrateStats, error) {
	var st MigrateStats
	start := time.Now()
	src, dst := c.nodes[from], c.nodes[to]
	if _, err := c.do(ctx, dst, "CLUSTER", "SETSLOT", slot, "IMPORTING", c.ids[from]); err != nil {
		return st, err
	}
	if _, err := c.do(ctx, src, "CLUSTER", "SETSLOT", slot, "MIGRATING", c.ids[to]); err != nil {
		return st, err
	}
	host, port, _ := net.SplitHostPort(dst.Addr())
	if cfg.opened != nil {
		cfg.opened()
	}
	for {
		reply, err := c.do(ctx, src, "CLUSTER", "GETKEYSINSLOT", slot, cfg.batch)
		if err != nil {
			return st, err
		}
		keys, _ := reply.([]any)
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", host, port, "", 0, 10000, "KEYS"}
		args = append(args, keys...)
		if _, err := c.do(ctx, src, args...); err != nil {
			return st, err
		}
		st.Keys += len(keys)
		st.Batches++
		if cfg.pause > 0 {
			time.Sleep(cfg.pause)
		}
	}
	// The target first, so that it owns the slot before the source stops
	// redirecting with ASK; then the source; then everyone else.
	order := []int{to, from}
	for _, m := range c.masterIndexes(ctx) {
		if m != to && m != from {
			order = append(order, m)
		}
	}
	for _, i := range order {
		if _, err := c.do(ctx, c.nodes[i], "CLUSTER", "SETSLOT", slot, "NODE", c.ids[to]); err != nil {
			return st, fmt.Errorf("node %d: %w", i, err)
		}
	}
	err := c.pollUntil(ctx, fmt.Sprintf("every node to see node %d own slot %d", to, slot), func() error {
		for i, s := range c.nodes {
			if !s.running() {
				continue
			}
			tab, err := c.table(ctx, s)
			if err != nil {
				return err
			}
			if e := tab.byID(c.ids[to]); e == nil || !e.owns(slot) {
				return fmt.Errorf("node %d does not see it yet", i)
			}
		}
		return nil
	})
	st.Duration = time.Since(start)
	return st, err
}

// Failover makes the replica of master node m take over its slots with
// CLUSTER FAILOVER (a manual, coordinated failover: no write is lost), and
// waits until the cluster agrees. It returns the index of the new master;
// node m is its replica from then on. It needs [WithReplicas].
func (c *Cluster) Failover(m int) int {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	tab, err := c.table(ctx, c.nodes[m])
	if err != nil {
		c.t.Fatalf("redistest: %v", err)
	}
	r := -1
	for _, e := range tab {
		if e.master == c.ids[m] {
			r = slices.Index(c.ids, e.id)
			break
		}
	}
	if r < 0 {
		c.t.Fatalf("redistest: node %d has no replica (StartCluster without WithReplicas?)", m)
	}
	if _, err := c.do(ctx, c.nodes[r], "CLUSTER", "FAILOVER"); err != nil {
		c.t.Fatalf("redistest: CLUSTER FAILOVER on node %d: %v", r, err)
	}
	err = c.pollUntil(ctx, fmt.Sprintf("node %d to replace master node %d", r, m), func() error {
		for i, s := range c.nodes {
			if !s.running() {
				continue
			}
			tab, err := c.table(ctx, s)
			if err != nil {
				return err
			}
			if e := tab.byID(c.ids[r]); e == nil || !e.has("master") {
				return fmt.Errorf("node %d does not see node %d as master yet", i, r)
			}
			if e := tab.byID(c.ids[m]); e == nil || e.master != c.ids[r] {
				return fmt.Errorf("node %d does not see node %d as replica of node %d yet", i, m, r)
			}
		}
		return nil
	})
	if err != nil {
		c.t.Fatalf("redistest: %v\n%s", err, c.dump())
	}
	if err := c.waitOK(ctx); err != nil {
		c.t.Fatalf("redistest: %v\n%s", err, c.dump())
	}
	return r
}

// KillMaster kills master node m with SIGKILL, as a crash would (no
// shutdown, no failover handed over), and returns the index of its
// replica, which the Cluster promotes in its place once the other nodes
// agree that m failed: after cluster-node-timeout ([WithNodeTimeout]) and
// an election. [Cluster.WaitPromoted] waits for that. It needs
// [WithReplicas]; node m stays down.
func (c *Cluster) KillMaster(m int) (replica int) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	tab, err := c.table(ctx, c.nodes[m])
	if err != nil {
		c.t.Fatalf("redistest: %v", err)
	}
	if e := tab.self(); e == nil || !e.has("master") {
		c.t.Fatalf("redistest: node %d is not a master", m)
	}
	replica = -1
	for _, e := range tab {
		if e.master == c.ids[m] {
			replica = slices.Index(c.ids, e.id)
			break
		}
	}
	if replica < 0 {
		c.t.Fatalf("redistest: node %d has no replica (StartCluster without WithReplicas?)", m)
	}
	c.nodes[m].Kill()
	return replica
}

// WaitPromoted waits until every running node sees node r as a master
// that serves slot, and says cluster_state:ok: the Cluster agrees on r.
// It returns when it saw them agree (its polls are 20 ms apart), and
// fails the test after 30 s.
func (c *Cluster) WaitPromoted(r, slot int) time.Time {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	err := c.pollUntil(ctx, fmt.Sprintf("every node to see node %d as the master of slot %d", r, slot), func() error {
		for i, s := range c.nodes {
			if !s.running() {
				continue
			}
			info, err := c.info(ctx, s, "CLUSTER", "INFO")
			if err != nil {
				return fmt.Errorf("node %d: %w", i, err)
			}
			if info["cluster_state"] != "ok" {
				return fmt.Errorf("node %d: cluster_state:%s", i, info["cluster_state"])
			}
			tab, err := c.table(ctx, s)
			if err != nil {
				return fmt.Errorf("node %d: %w", i, err)
			}
			if e := tab.byID(c.ids[r]); e == nil || !e.has("master") || !e.owns(slot) {
				return fmt.Errorf("node %d does not see node %d as the master of slot %d yet", i, r, slot)
			}
		}
		return nil
	})
	if err != nil {
		c.t.Fatalf("redistest: %v\n%s", err, c.dump())
	}
	return time.Now()
}

// dump returns every running node's CLUSTER NODES, for failure messages.
func (c *Cluster) dump() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var b strings.Builder
	for i, s := range c.nodes {
		if !s.running() {
			fmt.Fprintf(&b, "node %d (%s): stopped\n", i, s.Addr())
			continue
		}
		v, err := c.do(ctx, s, "CLUSTER", "NODES")
		fmt.Fprintf(&b, "node %d (%s) sees:\n%v%v\n", i, s.Addr(), v, err)
	}
	return b.String()
}

func (c *Cluster) masterIndexes(ctx context.Context) []int {
	var out []int
	for _, s := range c.nodes {
		if !s.running() {
			continue
		}
		tab, err := c.table(ctx, s)
		if err != nil {
			continue
		}
		for _, e := range tab {
			if e.has("master") {
				out = append(out, slices.Index(c.ids, e.id))
			}
		}
		break
	}
	return out
}

// do runs one command on node s's own connection.
func (c *Cluster) do(ctx context.Context, s *Server, args ...any) (any, error) {
	v, err := s.adminClient().Do(ctx, args...).Result()
	if err != nil {
		return nil, fmt.Errorf("%s: %v: %w", s.Addr(), args, err)
	}
	return v, nil
}

// info runs a command that answers "key:value" lines (CLUSTER INFO, INFO)
// and returns them as a map.
func (c *Cluster) info(ctx context.Context, s *Server, args ...any) (map[string]string, error) {
	v, err := c.do(ctx, s, args...)
	if err != nil {
		return nil, err
	}
	return parseInfoLines(fmt.Sprint(v)), nil
}

func parseInfoLines(text string) map[string]string {
	out := make(map[string]string)
	for _, l := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), ":"); ok {
			out[k] = v
		}
	}
	return out
}

// poll calls check every 20 ms until it returns nil or ctx ends.
func (c *Cluster) pollUntil(ctx context.Context, what string, check func() error) error {
	return pollUntil(ctx, what, check)
}

func pollUntil(ctx context.Context, what string, check func() error) error {
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last: %w)", what, ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id     string
	addr   string
	flags  []string
	master string // "-" for a master
	slots  [][2]int
}

func (e *clusterNode) has(flag string) bool { return slices.Contains(e.flags, flag) }

func (e *clusterNode) owns(slot int) bool {
	for _, r := range e.slots {
		if slot >= r[0] && slot <= r[1] {
			return true
		}
	}
	return false
}

type nodeTable []*clusterNode

func (c *Cluster) table(ctx context.Context, s *Server) (nodeTable, error) {
	v, err := c.do(ctx, s, "CLUSTER", "NODES")
	if err != nil {
		return nil, err
	}
	return parseNodes(fmt.Sprint(v))
}

func parseNodes(text string) (nodeTable, error) {
	var tab nodeTable
	for _, l := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(l)
		if len(f) < 8 {
			return nil, fmt.Errorf("CLUSTER NODES line %q", l)
		}
		e := &clusterNode{id: f[0], addr: f[1], flags: strings.Split(f[2], ","), master: f[3]}
		if i := strings.IndexByte(e.addr, '@'); i >= 0 {
			e.addr = e.addr[:i]
		}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				continue // a slot being imported or migrated
			}
			lo, hi, ok := strings.Cut(r, "-")
			if !ok {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err := errors.Join(err1, err2); err != nil {
				return nil, fmt.Errorf("CLUSTER NODES slots %q: %w", r, err)
			}
			e.slots = append(e.slots, [2]int{a, b})
		}
		tab = append(tab, e)
	}
	return tab, nil
}

func (t nodeTable) byID(id string) *clusterNode {
	for _, e := range t {
		if e.id == id {
			return e
		}
	}
	return nil
}

func (t nodeTable) self() *clusterNode {
	for _, e := range t {
		if e.has("myself") {
			return e
		}
	}
	return nil
}

// ownership returns a canonical text of which node owns which slots and
// which node replicates which.
func (t nodeTable) ownership() string {
	var parts []string
	for _, e := range t {
		if e.master != "-" {
			parts = append(parts, e.id+">"+e.master)
		}
		for _, r := range e.slots {
			parts = append(parts, fmt.Sprintf("%05d-%05d=%s", r[0], r[1], e.id))
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

// busAddr returns the host, port and cluster bus port of a cluster node.
func (s *Server) busAddr() (host, port, bus string) {
	host, port, _ = net.SplitHostPort(s.addr)
	for i, a := range s.args {
		if a == "--cluster-port" && i+1 < len(s.args) {
			bus = s.args[i+1]
		}
	}
	return host, port, bus
}

// running reports whether the server's process runs (it was not stopped).
func (s *Server) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// startMany starts n redis-servers at once, each on a free port with the
// defaults of [Start] and the extra arguments args returns for it (called
// again with fresh values whenever a port was taken), and registers their
// cleanups. It skips under -short and fails t when redis-server is
// missing, like [Start].
func startMany(t testing.TB, n int, args func(i int, dir string) ([]string, error)) []*Server {
	t.Helper()
	bin := lookBin(t)
	servers := make([]*Server, n)
	for i := range servers {
		servers[i] = &Server{t: t, bin: bin, dir: t.TempDir()}
		t.Cleanup(servers[i].Stop)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Go(func() {
			for attempt := 1; ; attempt++ {
				port, err := freePort()
				if err != nil {
					errs[i] = err
					return
				}
				s.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
				if s.args, err = args(i, s.dir); err != nil {
					errs[i] = err
					return
				}
				err = s.launch()
				if err == nil || !errors.Is(err, errAddrInUse) || attempt == 5 {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("redistest: start redis-server %d on %s: %v", i, servers[i].addr, err)
		}
	}
	return servers
}

// lookBin returns the path of redis-server, skipping t under -short and
// failing it when the binary is missing.
func lookBin(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("redistest: Redis-backed test skipped in -short mode")
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal(NotFoundMessage)
	}
	return bin
}

// Slot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of its
// hash tag (the text between the first "{" and the next "}", when that
// is not empty) or else of the whole key, modulo 16384.
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^key[k]]
	}
	return int(crc) % SlotCount
}

// KeysWhere returns the first n keys of the form prefix<i> (i = 0, 1, ...)
// whose hash slot satisfies ok. prefix must not contain braces. Finding n
// keys of one slot takes about 16384 x n tries: a few milliseconds per
// hundred keys.
func KeysWhere(n int, prefix string, ok func(slot int) bool) []string {
	// CRC16 of the prefix once, then of each number's digits.
	var pre uint16
	for k := 0; k < len(prefix); k++ {
		pre = pre<<8 ^ crcTable[byte(pre>>8)^prefix[k]]
	}
	out := make([]string, 0, n)
	buf := make([]byte, 0, 20)
	for i := 0; len(out) < n; i++ {
		buf = strconv.AppendInt(buf[:0], int64(i), 10)
		crc := pre
		for _, b := range buf {
			crc = crc<<8 ^ crcTable[byte(crc>>8)^b]
		}
		if ok(int(crc) % SlotCount) {
			out = append(out, prefix+string(buf))
		}
	}
	return out
}

// crcTable is the CRC16-XMODEM (polynomial 0x1021) table of Redis Cluster.
var crcTable = func() (t [256]uint16) {
	for i := range t {
		crc := uint16(i) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[i] = crc
	}
	return t
}()
