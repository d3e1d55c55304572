package redistest_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/internal/test/redistest"
)

func TestProxyDropConnections(t *testing.T) {
	s := redistest.Start(t)
	p := redistest.NewProxy(t, s.Addr())
	// No retries: every broken connection shows as an error.
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING through the proxy: %v", err)
	}

	t.Run("once", func(t *testing.T) {
		conns := p.Conns()
		p.DropConnections()
		// go-redis notices the closed connection in its pool (or fails
		// one command on it) and dials anew.
		var errs int
		for range 2 {
			if err := c.Ping(ctx).Err(); err != nil {
				errs++
			}
		}
		if errs > 1 {
			t.Errorf("PING twice after DropConnections: %d errors, want at most 1 (the dead pooled connection)", errs)
		}
		if err := c.Ping(ctx).Err(); err != nil {
			t.Errorf("PING after the reconnect: %v", err)
		}
		if p.Conns() <= conns {
			t.Errorf("Conns() = %d after DropConnections, want a new connection after %d", p.Conns(), conns)
		}
	})

	t.Run("dropping", func(t *testing.T) {
		p.SetDropping(true)
		for i := range 3 {
			start := time.Now()
			err := c.Ping(ctx).Err()
			if err == nil {
				t.Fatalf("PING #%d while dropping succeeded", i+1)
			}
			// A reset, not a timeout: the failure is quick.
			if d := time.Since(start); d > 500*time.Millisecond {
				t.Errorf("PING #%d while dropping failed after %v (%v), want a quick failure", i+1, d, err)
			}
		}
		p.SetDropping(false)
		var err error
		for range 3 { // a pooled connection may still be the dead one
			if err = c.Ping(ctx).Err(); err == nil {
				break
			}
		}
		if err != nil {
			t.Errorf("PING after SetDropping(false): %v", err)
		}
	})
}
