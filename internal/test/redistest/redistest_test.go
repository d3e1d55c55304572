package redistest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/ratekit/ratekit/internal/test/redistest"
)

func TestStartPingAndConfig(t *testing.T) {
	s := redistest.Start(t)
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") || strings.HasSuffix(s.Addr(), ":6379") {
		t.Errorf("Addr() = %q, want a free 127.0.0.1 port other than 6379", s.Addr())
	}
	ctx := context.Background()
	c := s.Client(t)
	if got, err := c.Ping(ctx).Result(); err != nil || got != "PONG" {
		t.Fatalf("PING = %q, %v, want PONG", got, err)
	}
	for _, tc := range []struct{ param, want string }{
		{"save", ""},
		{"appendonly", "no"},
		{"bind", "127.0.0.1"},
	} {
		got, err := c.ConfigGet(ctx, tc.param).Result()
		if err != nil {
			t.Fatalf("CONFIG GET %s: %v", tc.param, err)
		}
		if got[tc.param] != tc.want {
			t.Errorf("CONFIG GET %s = %q, want %q", tc.param, got[tc.param], tc.want)
		}
	}
}

func TestServersAreSeparate(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	if a.Addr() == b.Addr() {
		t.Fatalf("two servers share %s", a.Addr())
	}
	a.Do(t, "SET", "k", "a")
	if got := b.Do(t, "GET", "k"); got != nil {
		t.Errorf("GET k on the second server = %v, want nil", got)
	}
}

func TestWithArgs(t *testing.T) {
	s := redistest.Start(t, redistest.WithArgs("--maxmemory", "2mb"))
	got := s.Do(t, "CONFIG", "GET", "maxmemory")
	// RESP3 answers a map, RESP2 a flat list.
	switch v := got.(type) {
	case map[any]any:
		if v["maxmemory"] != "2097152" {
			t.Errorf("CONFIG GET maxmemory = %v, want 2097152", v)
		}
	case []any:
		if len(v) != 2 || v[1] != "2097152" {
			t.Errorf("CONFIG GET maxmemory = %v, want 2097152", v)
		}
	default:
		t.Errorf("CONFIG GET maxmemory = %T %v", got, got)
	}
}

func TestStopRestart(t *testing.T) {
	s := redistest.Start(t)
	ctx := context.Background()
	c := s.Client(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	s.Stop() // idempotent
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err := c.Ping(cctx).Err()
	cancel()
	if err == nil {
		t.Fatal("PING after Stop succeeded")
	}
	addr := s.Addr()
	s.Restart()
	if s.Addr() != addr {
		t.Errorf("Addr() after Restart = %s, want %s", s.Addr(), addr)
	}
	// go-redis may need a few tries to leave the dead connections behind.
	deadline := time.Now().Add(5 * time.Second)
	for {
		err = c.Ping(ctx).Err()
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
	if got, err := c.Get(ctx, "k").Result(); !errors.Is(err, redis.Nil) {
		t.Errorf("GET k after Restart = %q, %v, want nil (no persistence)", got, err)
	}
}

func TestPause(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client(t)
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	const pause = 300 * time.Millisecond
	start := time.Now()
	s.Pause(pause)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if got := time.Since(start); got < pause-20*time.Millisecond {
		t.Errorf("PING during a %v pause answered after %v", pause, got)
	}
}

func TestProxy(t *testing.T) {
	s := redistest.Start(t)
	p := redistest.NewProxy(t, s.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MinRetryBackoff: time.Millisecond})
	defer c.Close()
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING through the proxy: %v", err)
	}

	t.Run("latency", func(t *testing.T) {
		const d = 50 * time.Millisecond
		p.SetLatency(d)
		defer p.SetLatency(0)
		start := time.Now()
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if got := time.Since(start); got < d {
			t.Errorf("PING with %v latency took %v", d, got)
		}
	})

	t.Run("drop next reply", func(t *testing.T) {
		conns, reqs := p.Conns(), p.Requests()
		p.DropNextReply()
		// The INCR runs, its reply is lost, go-redis retries on a new
		// connection and the INCR runs again.
		got, err := c.Incr(ctx, "counter").Result()
		if err != nil {
			t.Fatalf("INCR: %v", err)
		}
		if got != 2 {
			t.Errorf("INCR after a dropped reply = %d, want 2 (ran twice)", got)
		}
		if d := p.Dropped(); d != 1 {
			t.Errorf("Dropped() = %d, want 1", d)
		}
		if p.Conns() <= conns {
			t.Errorf("Conns() = %d, want a new connection after %d", p.Conns(), conns)
		}
		if p.Requests() < reqs+2 {
			t.Errorf("Requests() = %d, want at least %d", p.Requests(), reqs+2)
		}
	})

	t.Run("close", func(t *testing.T) {
		p.Close()
		p.Close()
		cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		if err := c.Ping(cctx).Err(); err == nil {
			t.Error("PING through a closed proxy succeeded")
		}
	})
}

// TestStartWithoutRedisServer runs this test binary again with an empty
// PATH: a full run must fail with the install hint, a -short run skip.
func TestStartWithoutRedisServer(t *testing.T) {
	if os.Getenv("REDISTEST_CHILD") == "1" {
		redistest.Start(t)
		t.Log("Start returned")
		return
	}
	for _, tc := range []struct {
		name     string
		args     []string
		wantFail bool
		want     string
	}{
		{"full run fails", nil, true, redistest.NotFoundMessage},
		{"short run skips", []string{"-test.short"}, false, "SKIP"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"-test.run=^TestStartWithoutRedisServer$", "-test.v"}, tc.args...)
			cmd := exec.Command(os.Args[0], args...)
			cmd.Env = append(os.Environ(), "REDISTEST_CHILD=1", "PATH="+t.TempDir())
			out, err := cmd.CombinedOutput()
			if failed := err != nil; failed != tc.wantFail {
				t.Errorf("child run error = %v, want failed=%v\n%s", err, tc.wantFail, out)
			}
			if !strings.Contains(string(out), tc.want) || strings.Contains(string(out), "Start returned") {
				t.Errorf("child output does not show %q (or Start returned):\n%s", tc.want, out)
			}
		})
	}
}

// TestNoGoroutinesLeft: a proxy and a server, stopped, leave no goroutine
// behind, after traffic, a dropped reply and latency.
func TestNoGoroutinesLeft(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	s := redistest.Start(t)
	p := redistest.NewProxy(t, s.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MinRetryBackoff: time.Millisecond})
	ctx := context.Background()
	for range 3 {
		if err := c.Incr(ctx, "n").Err(); err != nil {
			t.Fatal(err)
		}
	}
	p.DropNextReply()
	if err := c.Incr(ctx, "n").Err(); err != nil {
		t.Fatal(err)
	}
	p.SetLatency(time.Hour) // Close must not wait for it
	go c.Ping(ctx)          // stuck in the proxy's latency until Close
	time.Sleep(20 * time.Millisecond)
	s.Do(t, "PING")                 // lazily opened admin connection, closed by Stop
	s.Pause(200 * time.Millisecond) // Stop must work while paused
	_ = c.Close()
	p.Close()
	s.Stop()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := goleak.Find(ignore)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("goroutines left: %v", err)
		}
	}
}
