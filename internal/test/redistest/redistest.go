// Package redistest starts real redis-server processes for tests: each
// [Server] listens on its own free loopback port, keeps no data on disk, and
// is stopped when the test ends. A [Proxy] sits between a client and a
// server to add latency or drop replies.
//
// Tests never use a Redis that is already running on the machine: every
// test gets a server of its own, so nothing is flushed that belongs to
// someone else.
//
// A test that calls [Start] fails when redis-server is not installed, so
// Redis coverage cannot vanish silently; with -short it is skipped.
package redistest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// NotFoundMessage is the failure message of [Start] when redis-server is
// not on PATH.
const NotFoundMessage = "redis-server not found: install it (apt-get install redis-server) or run `make test`"

// startTimeout bounds how long [Start] and [Server.Restart] wait for the
// server to answer PING.
const startTimeout = 10 * time.Second

// stopTimeout is how long [Server.Stop] waits after SIGTERM before it
// kills the server.
const stopTimeout = 5 * time.Second

// Option configures a [Server].
type Option func(*config)

type config struct {
	args []string
}

// WithArgs passes extra command-line configuration to redis-server, for
// example WithArgs("--maxmemory", "1mb"). They come after the defaults
// (port, bind address, no persistence, temporary dir), so they can
// override them.
func WithArgs(args ...string) Option {
	return func(c *config) { c.args = append(c.args, args...) }
}

// Server is a redis-server process started by [Start].
//
// Stop, Restart and Pause report failures to the testing.TB given to
// Start with Fatalf: call them from that test's goroutine. Addr is safe
// for concurrent use.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	args []string
	addr string

	mu    sync.Mutex
	cmd   *exec.Cmd
	done  chan struct{} // closed when cmd has exited
	admin *redis.Client
}

// Start starts a redis-server on a free port of 127.0.0.1 with no
// persistence (--save "" --appendonly no) and its own temporary
// directory, waits until it answers PING, and registers a cleanup that
// stops it.
//
// With -short, Start skips the test. Otherwise, when redis-server is not
// on PATH, it fails the test with [NotFoundMessage].
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	if testing.Short() {
		t.Skip("redistest: Redis-backed test skipped in -short mode")
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal(NotFoundMessage)
	}
	var c config
	for _, opt := range opts {
		opt(&c)
	}
	s := &Server{t: t, bin: bin, dir: t.TempDir(), args: c.args}
	t.Cleanup(s.Stop)
	// A free port can be taken by someone else between the probe and
	// redis-server's bind: try another one then.
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		s.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		err = s.launch()
		if err == nil {
			return s
		}
		if !errors.Is(err, errAddrInUse) || attempt == 5 {
			t.Fatalf("redistest: start redis-server on %s: %v", s.addr, err)
		}
	}
}

// Addr returns the server's address, "127.0.0.1:port". It stays the same
// across [Server.Restart].
func (s *Server) Addr() string { return s.addr }

// Client returns a go-redis client for the server built with default
// options, closed when t ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Do runs one command on a connection of the server's own (not one of the
// clients returned by [Server.Client]) and returns its reply. It fails t
// on any error but redis.Nil, for which it returns nil.
func (s *Server) Do(t testing.TB, args ...any) any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := s.adminClient().Do(ctx, args...).Result()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if err != nil {
		t.Fatalf("redistest: %v: %v", args, err)
	}
	return v
}

// Pause suspends every client of the server for d (CLIENT PAUSE d ALL),
// sent on a connection of the server's own. It returns at once; the pause
// ends by itself.
func (s *Server) Pause(d time.Duration) {
	s.t.Helper()
	s.Do(s.t, "CLIENT", "PAUSE", d.Milliseconds(), "ALL")
}

// Stop stops the server: SIGTERM, then SIGKILL if it has not exited within
// a few seconds. It waits for the process to exit. Stopping a stopped
// server does nothing. Clients see connection errors until
// [Server.Restart].
func (s *Server) Stop() {
	cmd, done := s.detach()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(stopTimeout):
		_ = cmd.Process.Kill()
		<-done
	}
}

// detach forgets the running process and closes the admin connection, so
// that it can be stopped; cmd is nil when none runs.
func (s *Server) detach() (cmd *exec.Cmd, done chan struct{}) {
	s.mu.Lock()
	cmd, done, admin := s.cmd, s.done, s.admin
	s.cmd, s.admin = nil, nil
	s.mu.Unlock()
	if admin != nil {
		_ = admin.Close()
	}
	return cmd, done
}

// Restart stops the server if it runs and starts it again, empty, on the
// same port.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	// The port was ours a moment ago; if something else grabbed it, retry
	// briefly before giving up.
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		if err = s.launch(); err == nil || !errors.Is(err, errAddrInUse) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		s.t.Fatalf("redistest: restart redis-server on %s: %v", s.addr, err)
	}
}

func (s *Server) adminClient() *redis.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.admin == nil {
		s.admin = redis.NewClient(&redis.Options{Addr: s.addr, PoolSize: 2})
	}
	return s.admin
}

var errAddrInUse = errors.New("address already in use")

// launch starts redis-server on s.addr and waits until it answers.
func (s *Server) launch() error {
	_, port, _ := net.SplitHostPort(s.addr)
	args := []string{
		"--port", port,
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--daemonize", "no",
		"--logfile", "",
	}
	args = append(args, s.args...)
	cmd := exec.Command(s.bin, args...)
	out := &tailBuffer{max: 64 << 10}
	cmd.Stdout, cmd.Stderr = out, out
	setProcAttr(cmd)
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	kill := func() {
		_ = cmd.Process.Kill()
		<-done
	}
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-done:
			if strings.Contains(out.String(), "Address already in use") {
				return fmt.Errorf("%w:\n%s", errAddrInUse, out)
			}
			return fmt.Errorf("redis-server exited: %v\n%s", cmd.ProcessState, out)
		default:
		}
		// The PING must be answered by this process, not by another server
		// that took the port first: compare process ids.
		pid, err := serverPID(s.addr)
		if err == nil && pid == cmd.Process.Pid {
			break
		}
		if err == nil {
			kill()
			return fmt.Errorf("%w: port answered by redis-server pid %d", errAddrInUse, pid)
		}
		if time.Now().After(deadline) {
			kill()
			return fmt.Errorf("no answer within %v: %w\n%s", startTimeout, err, out)
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	return nil
}

// serverPID asks the server at addr for its process id (INFO server) on a
// fresh connection, without go-redis, so probing does not log or retry.
func serverPID(addr string) (int, error) {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n")); err != nil {
		return 0, err
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	if !strings.HasPrefix(line, "$") {
		// "-LOADING ..." and the like: not ready yet.
		return 0, fmt.Errorf("INFO answered %q", strings.TrimSpace(line))
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("INFO answered %q", strings.TrimSpace(line))
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(body), "\r\n") {
		if v, ok := strings.CutPrefix(l, "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, errors.New("INFO server has no process_id")
}

// freePort returns a port of 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tailBuffer keeps the last max bytes written to it, for error messages.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   bytes.Buffer
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b.Write(p)
	if over := b.b.Len() - b.max; over > 0 {
		b.b.Next(over)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
