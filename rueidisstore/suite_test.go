package rueidisstore_test

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/ratekit/ratekit/internal/test/redissuite"
	"github.com/ratekit/ratekit/rueidisstore"
)

// rueidisDriver builds the suite's stores on rueidis clients of a server
// or of a Cluster's nodes (rueidis finds which), built with default
// options but what the suite's Conf says. rueidis connects when the
// client is built, and does not count redirects.
var rueidisDriver = redissuite.Driver{
	Name:           "rueidisstore",
	Connect:        connect,
	ErrPrefix:      "rueidisstore: ",
	DropsAbandoned: true,
}

// TestSuite runs the suite every Redis driver passes.
func TestSuite(t *testing.T) { redissuite.Run(t, rueidisDriver) }

// TestTimed runs the suite's tests timed against the wall clock: `make
// test` skips it, `make test-timing` runs it alone.
func TestTimed(t *testing.T) { redissuite.RunTimed(t, rueidisDriver) }

func connect(t testing.TB, c redissuite.Conf) (redissuite.Store, func()) {
	t.Helper()
	opt := rueidis.ClientOption{InitAddress: c.Addrs, Username: c.Username, Password: c.Password, SelectDB: c.DB,
		DisableRetry: c.NoRetry}
	if c.Quiet {
		// One connection (rueidis opens one more per GOMAXPROCS doubling,
		// each on first use), no background PING in a test's time, no
		// client-side cache.
		opt.PipelineMultiplex = -1
		opt.Dialer = net.Dialer{KeepAlive: time.Minute}
		opt.DisableCache = true
	}
	client, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatalf("rueidis.NewClient(%v): %v", opt.InitAddress, err)
	}
	if c.Cluster && client.Mode() != rueidis.ClientModeCluster {
		client.Close()
		t.Fatalf("rueidis client of %v in mode %v, want cluster", c.Addrs, client.Mode())
	}
	var once sync.Once
	closeClient := func() { once.Do(client.Close) }
	t.Cleanup(closeClient)
	if c.Commands != nil {
		client = &countingClient{Client: client, n: c.Commands}
	}
	var opts []rueidisstore.Option
	if c.Prefix != "" {
		opts = append(opts, rueidisstore.WithPrefix(c.Prefix))
	}
	if c.Batching != 0 {
		opts = append(opts, rueidisstore.WithBatching(c.Batching))
	}
	s := rueidisstore.New(client, opts...)
	t.Cleanup(s.Close) // before the client's
	return s, closeClient
}

// countingClient counts the commands a rueidis client sends.
type countingClient struct {
	rueidis.Client
	n *atomic.Int64
}

func (c *countingClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.n.Add(1)
	return c.Client.Do(ctx, cmd)
}

func (c *countingClient) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	c.n.Add(int64(len(multi)))
	return c.Client.DoMulti(ctx, multi...)
}

func (c *countingClient) Receive(ctx context.Context, subscribe rueidis.Completed, fn func(rueidis.PubSubMessage)) error {
	c.n.Add(1)
	return c.Client.Receive(ctx, subscribe, fn)
}
