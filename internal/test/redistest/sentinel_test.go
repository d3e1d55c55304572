package redistest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/internal/test/redistest"
)

func TestSentinelFailover(t *testing.T) {
	start := time.Now()
	s := redistest.StartSentinel(t)
	t.Logf("master, replica and 3 sentinels up in %v", time.Since(start))
	if got, want := s.Master(), s.Node(0).Addr(); got != want {
		t.Fatalf("Master() = %s, want node 0 (%s)", got, want)
	}
	if len(s.SentinelAddrs()) != 3 {
		t.Fatalf("SentinelAddrs() = %v, want 3", s.SentinelAddrs())
	}
	ctx := context.Background()
	rdb := s.FailoverClient(t)
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// Make sure the replica has it before the crash.
	if n, _ := s.Node(0).Do(t, "WAIT", 1, 5000).(int64); n != 1 {
		// WAIT on another connection than the SET's returns at once; the
		// replica is in sync on loopback anyway.
		t.Logf("WAIT = %d", n)
	}
	time.Sleep(100 * time.Millisecond)

	old := s.KillMaster()
	start = time.Now()
	addr := s.WaitFailover(old)
	t.Logf("failover from %s to %s in %v", old, addr, time.Since(start))
	if addr != s.Node(1).Addr() {
		t.Errorf("new master %s, want node 1 (%s)", addr, s.Node(1).Addr())
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := rdb.Get(ctx, "k").Result()
		if err == nil && got == "v" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET k through the failover client after the failover = %q, %v; want v", got, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := rdb.Set(ctx, "k2", "v", 0).Err(); err != nil {
		t.Errorf("SET on the new master: %v", err)
	}
}

func TestSentinelReplicationLag(t *testing.T) {
	const lag = 200 * time.Millisecond
	s := redistest.StartSentinel(t, redistest.WithReplicationLag(lag))
	ctx := context.Background()
	master, replica := s.Node(0).Client(t), s.Node(1).Client(t)
	if err := master.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for {
		_, err := replica.Get(ctx, "k").Result()
		if err == nil {
			break
		}
		if !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	got := time.Since(start)
	t.Logf("write seen on the replica after %v", got)
	if got < lag*3/4 || got > 5*lag {
		t.Errorf("the replica saw a write after %v, want about %v", got, lag)
	}

	// WAIT on the writer's connection returns once the replica has it.
	conn := master.Conn()
	defer conn.Close()
	if err := conn.Set(ctx, "k2", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	n, err := conn.Wait(ctx, 1, 5*time.Second).Result()
	if err != nil || n != 1 {
		t.Fatalf("WAIT 1 = %d, %v; want 1", n, err)
	}
	t.Logf("WAIT 1 answered after %v", time.Since(start))

	// A write in the line when the master dies is lost.
	if err := master.Set(ctx, "lost", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	old := s.KillMaster()
	s.WaitFailover(old)
	if _, err := replica.Get(ctx, "lost").Result(); !errors.Is(err, redis.Nil) {
		t.Errorf("GET lost on the promoted replica = %v, want nil (the write was in the line)", err)
	}
	if got, err := replica.Get(ctx, "k2").Result(); err != nil || got != "v" {
		t.Errorf("GET k2 on the promoted replica = %q, %v; want v (WAIT acknowledged it)", got, err)
	}
}
