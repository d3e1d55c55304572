package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// redisServer is a redis-server process of the harness's own: a free
// port of 127.0.0.1, no persistence, a temporary directory. The main
// module's internal/test/redistest cannot be imported from this module, so
// this is its small twin.
type redisServer struct {
	addr string
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

// startRedis starts redis-server and waits until it answers PING. With
// wrap set, the server runs under that command (valgrind and its flags).
func startRedis(ctx context.Context, wrap ...string) (*redisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("redis-server not found on PATH: install it (apt-get install redis-server)")
	}
	dir, err := os.MkdirTemp("", "ratekit-bench-redis-")
	if err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		s, err := launchRedis(ctx, append(wrap, bin), dir)
		if err == nil {
			return s, nil
		}
		if attempt == 5 {
			_ = os.RemoveAll(dir)
			return nil, err
		}
	}
}

func launchRedis(ctx context.Context, argv []string, dir string) (*redisServer, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("find a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	s := &redisServer{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir, done: make(chan struct{})}
	s.cmd = exec.Command(argv[0], append(argv[1:],
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--daemonize", "no",
		"--logfile", "",
	)...)
	// The kernel kills the server if the harness dies without stopping it.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	go func() {
		_ = s.cmd.Wait()
		close(s.done)
	}()
	deadline := time.Now().Add(30 * time.Second) // valgrind takes seconds to start
	for {
		select {
		case <-s.done:
			return nil, fmt.Errorf("redis-server on %s exited at start (port taken?)", s.addr)
		case <-ctx.Done():
			s.kill()
			return nil, ctx.Err()
		default:
		}
		if ping(s.addr) == nil {
			return s, nil
		}
		if time.Now().After(deadline) {
			s.kill()
			return nil, fmt.Errorf("redis-server on %s did not answer within 30s", s.addr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ping sends PING on a fresh connection and expects +PONG.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

// port returns the server's port as a string.
func (s *redisServer) port() string {
	_, p, _ := net.SplitHostPort(s.addr)
	return p
}

// stop ends the server (SIGTERM, then SIGKILL) and removes its directory.
func (s *redisServer) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		s.kill()
	}
	_ = os.RemoveAll(s.dir)
}

// kill ends the server at once and waits for it.
func (s *redisServer) kill() {
	_ = s.cmd.Process.Kill()
	<-s.done
}
