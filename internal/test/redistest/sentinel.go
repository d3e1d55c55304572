package redistest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// MasterName is the name under which the sentinels of a [Sentinel]
// monitor their master, for redis.FailoverOptions.MasterName.
const MasterName = "ratekit"

// sentinelTimeout bounds how long [StartSentinel] and
// [Sentinel.WaitFailover] wait. A failover takes 1-3 s after the master
// died; the rest is room for a loaded machine (and for one failed
// election, retried after twice the failover timeout).
const sentinelTimeout = 45 * time.Second

// Sentinel timing: the master is down after downAfter without an answer;
// failoverTimeout also spaces two failover attempts (x2).
const (
	downAfter       = 500 * time.Millisecond
	failoverTimeout = 3 * time.Second
	// lagFailoverTimeout is the failover timeout with a replication lag.
	// Sentinel re-points a replica that replicates from an address other
	// than the master's (our delay line) after the failover timeout; it
	// must not do so while a test runs.
	lagFailoverTimeout = 15 * time.Second
)

// SentinelOption configures a [Sentinel].
type SentinelOption func(*sentinelConfig)

type sentinelConfig struct {
	lag time.Duration
}

// WithReplicationLag makes the replica receive the master's replication
// stream lag late, through a delay line on loopback (its acknowledgements
// go back at once). [Sentinel.KillMaster] then cuts the line together with
// the master, so the writes of the last lag are lost as in a crash of the
// master's host while its replica lags behind. Asynchronous replication
// on one machine lags by microseconds; this makes the loss measurable.
func WithReplicationLag(lag time.Duration) SentinelOption {
	return func(c *sentinelConfig) { c.lag = lag }
}

// Sentinel is a Redis master, one replica and three sentinels (quorum 2,
// down-after-milliseconds 500) on loopback, started by [StartSentinel].
// Node 0 is the master as started and node 1 its replica; after a
// failover the sentinels know better: ask [Sentinel.Master].
//
// Methods that fail report to the testing.TB given to StartSentinel: call
// them from that test's goroutine. SentinelAddrs and Node are safe for
// concurrent use.
type Sentinel struct {
	t         testing.TB
	nodes     []*Server
	sentinels []*sentinelProc
	lag       *delayLine
}

// StartSentinel starts a master and a replica, waits until the replica is
// in sync, then starts three sentinels that monitor the master as
// [MasterName] and waits until each of them knows the replica and the two
// other sentinels, so a failover can be voted. Every process is stopped
// when the test ends. Startup takes a few seconds (sentinels discover each
// other every 2 s).
//
// Like [Start], it skips the test with -short and fails it when
// redis-server is not on PATH.
func StartSentinel(t testing.TB, opts ...SentinelOption) *Sentinel {
	t.Helper()
	var cfg sentinelConfig
	for _, opt := range opts {
		opt(&cfg)
	}
	nodes := startMany(t, 2, func(int, string) ([]string, error) {
		return []string{"--repl-diskless-sync-delay", "0"}, nil
	})
	s := &Sentinel{t: t, nodes: nodes}
	ctx, cancel := context.WithTimeout(context.Background(), sentinelTimeout)
	defer cancel()

	upstream := nodes[0].Addr()
	timeout := failoverTimeout
	if cfg.lag > 0 {
		l, err := newDelayLine(upstream, cfg.lag)
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		s.lag = l
		t.Cleanup(l.Close)
		upstream = l.Addr()
		timeout = lagFailoverTimeout
	}
	host, port, _ := net.SplitHostPort(upstream)
	if err := nodes[1].adminClient().Do(ctx, "REPLICAOF", host, port).Err(); err != nil {
		t.Fatalf("redistest: REPLICAOF: %v", err)
	}
	if err := pollUntil(ctx, "the replica to sync", func() error {
		info, err := nodeInfo(ctx, nodes[1], "replication")
		if err != nil {
			return err
		}
		if info["master_link_status"] != "up" {
			return fmt.Errorf("replica: master_link_status:%s", info["master_link_status"])
		}
		return nil
	}); err != nil {
		t.Fatalf("redistest: %v", err)
	}

	bin := lookBin(t)
	s.sentinels = make([]*sentinelProc, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range s.sentinels {
		dir := t.TempDir()
		wg.Go(func() {
			s.sentinels[i], errs[i] = startSentinelProcess(bin, dir, nodes[0].Addr(), timeout)
		})
	}
	wg.Wait()
	for i, p := range s.sentinels {
		if p != nil {
			t.Cleanup(p.stop)
		}
		if errs[i] != nil {
			t.Fatalf("redistest: start sentinel %d: %v", i, errs[i])
		}
	}
	if err := pollUntil(ctx, "every sentinel to know the replica and the other sentinels", func() error {
		for i, p := range s.sentinels {
			sc := p.sentinelClient()
			m, err := sc.Master(ctx, MasterName).Result()
			if err != nil {
				return fmt.Errorf("sentinel %d: %w", i, err)
			}
			if m["flags"] != "master" || m["num-slaves"] != "1" || m["num-other-sentinels"] != "2" {
				return fmt.Errorf("sentinel %d: flags %s, num-slaves %s, num-other-sentinels %s", i, m["flags"], m["num-slaves"], m["num-other-sentinels"])
			}
			rs, err := sc.Replicas(ctx, MasterName).Result()
			if err != nil {
				return fmt.Errorf("sentinel %d: %w", i, err)
			}
			if len(rs) != 1 || rs[0]["flags"] != "slave" || rs[0]["master-link-status"] != "ok" {
				return fmt.Errorf("sentinel %d: replicas %v", i, rs)
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return s
}

// Node returns data node i: 0 is the master as started, 1 its replica.
func (s *Sentinel) Node(i int) *Server { return s.nodes[i] }

// SentinelAddrs returns the sentinels' addresses, for
// redis.FailoverOptions.SentinelAddrs.
func (s *Sentinel) SentinelAddrs() []string {
	out := make([]string, len(s.sentinels))
	for i, p := range s.sentinels {
		out[i] = p.addr
	}
	return out
}

// FailoverClient returns a go-redis client that finds the master through
// the sentinels (redis.NewFailoverClient with [MasterName]) and follows
// failovers, built with default options and closed when t ends.
func (s *Sentinel) FailoverClient(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: MasterName, SentinelAddrs: s.SentinelAddrs()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Master returns the address of the master as the first sentinel that
// answers names it.
func (s *Sentinel) Master() string {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var errs []error
	for _, p := range s.sentinels {
		addr, err := p.sentinelClient().GetMasterAddrByName(ctx, MasterName).Result()
		if err == nil && len(addr) == 2 {
			return net.JoinHostPort(addr[0], addr[1])
		}
		errs = append(errs, err)
	}
	s.t.Fatalf("redistest: no sentinel names the master: %v", errors.Join(errs...))
	return ""
}

// KillMaster kills the current master with SIGKILL, as a crash would
// (with [WithReplicationLag], the delay line is cut at the same moment,
// losing what it held), and returns its address. The sentinels notice
// after 500 ms and promote the replica: see [Sentinel.WaitFailover].
func (s *Sentinel) KillMaster() string {
	s.t.Helper()
	addr := s.Master()
	i := slices.IndexFunc(s.nodes, func(n *Server) bool { return n.Addr() == addr })
	if i < 0 {
		s.t.Fatalf("redistest: the sentinels name %s, not one of our nodes", addr)
	}
	if s.lag != nil {
		s.lag.Close()
	}
	s.nodes[i].Kill()
	return addr
}

// WaitFailover waits until every sentinel names a master other than old,
// and that node answers as a master; it returns the new master's address.
func (s *Sentinel) WaitFailover(old string) string {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), sentinelTimeout)
	defer cancel()
	var addr string
	err := pollUntil(ctx, "the sentinels to promote a new master", func() error {
		addr = ""
		for i, p := range s.sentinels {
			a, err := p.sentinelClient().GetMasterAddrByName(ctx, MasterName).Result()
			if err != nil {
				return fmt.Errorf("sentinel %d: %w", i, err)
			}
			got := net.JoinHostPort(a[0], a[1])
			if got == old {
				return fmt.Errorf("sentinel %d still names %s", i, old)
			}
			if addr != "" && got != addr {
				return fmt.Errorf("sentinels name %s and %s", addr, got)
			}
			addr = got
		}
		i := slices.IndexFunc(s.nodes, func(n *Server) bool { return n.Addr() == addr })
		if i < 0 {
			return fmt.Errorf("the sentinels name %s, not one of our nodes", addr)
		}
		info, err := nodeInfo(ctx, s.nodes[i], "replication")
		if err != nil {
			return err
		}
		if info["role"] != "master" {
			return fmt.Errorf("%s answers role:%s", addr, info["role"])
		}
		return nil
	})
	if err != nil {
		s.t.Fatalf("redistest: %v", err)
	}
	return addr
}

// Kill stops the server at once with SIGKILL, as a crash would: no
// shutdown, nothing more sent to replicas or clients. Killing a stopped
// server does nothing; [Server.Restart] brings it back, empty.
func (s *Server) Kill() {
	cmd, done := s.detach()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

func nodeInfo(ctx context.Context, s *Server, section string) (map[string]string, error) {
	v, err := s.adminClient().Info(ctx, section).Result()
	if err != nil {
		return nil, fmt.Errorf("%s: INFO %s: %w", s.Addr(), section, err)
	}
	return parseInfoLines(v), nil
}

// sentinelProc is a sentinel: a redis-server --sentinel process with its own
// config file, which it rewrites as it learns.
type sentinelProc struct {
	addr string
	cmd  *exec.Cmd
	done chan struct{}
	out  *tailBuffer

	mu     sync.Mutex
	client *redis.SentinelClient
}

// startSentinelProcess starts a sentinel that monitors master, on a free
// port, retrying on another port if the one it probed was taken.
func startSentinelProcess(bin, dir, master string, failoverTimeout time.Duration) (*sentinelProc, error) {
	mhost, mport, _ := net.SplitHostPort(master)
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		conf := strings.Join([]string{
			"port " + strconv.Itoa(port),
			"bind 127.0.0.1",
			"daemonize no",
			`logfile ""`,
			"dir " + dir,
			fmt.Sprintf("sentinel monitor %s %s %s 2", MasterName, mhost, mport),
			fmt.Sprintf("sentinel down-after-milliseconds %s %d", MasterName, downAfter.Milliseconds()),
			fmt.Sprintf("sentinel failover-timeout %s %d", MasterName, failoverTimeout.Milliseconds()),
			fmt.Sprintf("sentinel parallel-syncs %s 1", MasterName),
			"",
		}, "\n")
		path := filepath.Join(dir, "sentinel.conf")
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			return nil, err
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		p, err := launchProcess(bin, []string{path, "--sentinel"}, addr)
		if err == nil || !errors.Is(err, errAddrInUse) || attempt == 5 {
			return p, err
		}
	}
}

// launchProcess starts bin with args and waits until addr answers INFO
// with the new process's id, as [Server] does.
func launchProcess(bin string, args []string, addr string) (*sentinelProc, error) {
	cmd := exec.Command(bin, args...)
	out := &tailBuffer{max: 64 << 10}
	cmd.Stdout, cmd.Stderr = out, out
	setProcAttr(cmd)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &sentinelProc{addr: addr, cmd: cmd, done: make(chan struct{}), out: out}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-p.done:
			if strings.Contains(out.String(), "Address already in use") {
				return nil, fmt.Errorf("%w:\n%s", errAddrInUse, out)
			}
			return nil, fmt.Errorf("%s exited: %v\n%s", bin, cmd.ProcessState, out)
		default:
		}
		pid, err := serverPID(addr)
		if err == nil && pid == cmd.Process.Pid {
			return p, nil
		}
		if err == nil {
			p.kill()
			return nil, fmt.Errorf("%w: port answered by pid %d", errAddrInUse, pid)
		}
		if time.Now().After(deadline) {
			p.kill()
			return nil, fmt.Errorf("no answer within %v: %w\n%s", startTimeout, err, out)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (p *sentinelProc) sentinelClient() *redis.SentinelClient {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.client == nil {
		p.client = redis.NewSentinelClient(&redis.Options{Addr: p.addr, PoolSize: 2})
	}
	return p.client
}

func (p *sentinelProc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// stop stops the process: SIGTERM, then SIGKILL after a few seconds.
func (p *sentinelProc) stop() {
	p.mu.Lock()
	c := p.client
	p.client = nil
	p.mu.Unlock()
	if c != nil {
		_ = c.Close()
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopTimeout):
		p.kill()
	}
}

// delayLine is a loopback TCP forwarder whose replies (target to client)
// arrive lag late, each chunk lag after it was read: a constant lag, not a
// throughput limit. Requests (client to target) pass at once.
type delayLine struct {
	*relay
	target string
	lag    time.Duration
}

func newDelayLine(target string, lag time.Duration) (*delayLine, error) {
	r, err := newRelay()
	if err != nil {
		return nil, fmt.Errorf("delay line: %w", err)
	}
	d := &delayLine{relay: r, target: target, lag: lag}
	r.start(nil, d.serve)
	return d, nil
}

func (d *delayLine) Addr() string { return d.addr() }

// Close cuts every connection at once; what the line held is lost.
func (d *delayLine) Close() { d.close() }

type lagChunk struct {
	due time.Time
	b   []byte
}

func (d *delayLine) serve(client net.Conn) {
	defer client.Close()
	server, err := net.DialTimeout("tcp", d.target, 5*time.Second)
	if err != nil || !d.track(server) {
		return
	}
	defer server.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	// Requests at once.
	wg.Go(func() {
		_, _ = io.Copy(server, client)
		_ = server.Close()
	})
	// Replies lag late.
	q := make(chan lagChunk, 4096)
	wg.Go(func() {
		defer client.Close()
		for c := range q {
			if wait := time.Until(c.due); wait > 0 {
				tm := time.NewTimer(wait)
				select {
				case <-tm.C:
				case <-d.done:
					tm.Stop()
					return
				}
			}
			if _, err := client.Write(c.b); err != nil {
				return
			}
		}
	})
	defer close(q)
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			select {
			case q <- lagChunk{due: time.Now().Add(d.lag), b: slices.Clone(buf[:n])}:
			case <-d.done:
				return
			}
		}
		if err != nil {
			return
		}
	}
}
