package redisstore_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/ratekit/ratekit/internal/test/redissuite"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/redisstore"
)

// goRedis builds the suite's stores on go-redis clients: redis.NewClient
// of a server, or redis.NewClusterClient of a Cluster's nodes, built with
// default options but what the suite's Conf says. A Cluster client checks
// that every script call names one key and every multi-key command stays
// in one slot (the server would answer CROSSSLOT otherwise), and counts
// the redirects its nodes answer.
var goRedis = redissuite.Driver{
	Name:      "redisstore",
	Connect:   connect,
	ErrPrefix: "redisstore: ",
	LazyDial:  true,
	Redirects: true,
	Redials:   true,
	Replies:   runtime.GOOS == "linux",
}

// TestSuite runs the suite every Redis driver passes, and its cases of
// exactness, faults and transitions again on clients built with
// ContextTimeoutEnabled, where a lone caller runs its own flight.
func TestSuite(t *testing.T) {
	redissuite.Run(t, goRedis)
	t.Run("ContextTimeout", func(t *testing.T) {
		redissuite.RunNamed(t, goRedisCtx, "Store", "RedisExactness", "RedisSameInstant", "RedisRetryCountedOnce", "RedisLibraryReload",
			"RedisMatchesMemory", "RedisBatchingExact", "RedisScriptsAfterRestart", "FailLocalShare", "InFlightExact",
			"OutageEndCounts", "LateRepliesCount", "ResetThroughBreaker")
	})
}

// goRedisCtx is goRedis on clients built with ContextTimeoutEnabled.
var goRedisCtx = func() redissuite.Driver {
	d := goRedis
	d.Name = "redisstore (ContextTimeoutEnabled)"
	d.Connect = func(t testing.TB, c redissuite.Conf) (redissuite.Store, func()) {
		c.ContextTimeout = true
		return connect(t, c)
	}
	return d
}()

// TestTimed runs the suite's tests timed against the wall clock, and
// go-redis's own: `make test` skips it, `make test-timing` runs it alone.
func TestTimed(t *testing.T) {
	redissuite.RunTimed(t, goRedis)
	t.Run("RedisPoolExhausted", testRedisPoolExhausted)
	t.Run("ContextTimeout", func(t *testing.T) {
		redissuite.RunNamed(t, goRedisCtx, "RedisFaults", "RedisTimeoutWhilePaused", "RedisDown", "RedisSaturatedApp", "RedisFrozenSaturatedApp")
	})
}

func connect(t testing.TB, c redissuite.Conf) (redissuite.Store, func()) {
	t.Helper()
	if len(c.Addrs) == 0 {
		t.Fatal("redissuite.Conf without Addrs")
	}
	retries := 0 // go-redis's default, 3
	if c.NoRetry {
		retries = -1
	}
	var client redis.UniversalClient
	if c.Cluster {
		cc := redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: c.Addrs, Username: c.Username, Password: c.Password, MaxRetries: retries,
			ContextTimeoutEnabled: c.ContextTimeout,
			// go-redis v9.23 shares a node's options with the redis.Conn
			// [redisstore.WithWaitReplicas] takes from it, under two locks,
			// and its auto mode writes them when the server (Redis 7)
			// refuses maintenance notifications: a race in go-redis, not
			// ours.
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
			NewClient: func(opt *redis.Options) *redis.Client {
				n := redis.NewClient(opt)
				if c.Redirects != nil {
					n.AddHook(&redirectHook{c.Redirects})
				}
				return n
			},
		})
		slots := &slotHook{}
		cc.AddHook(slots)
		t.Cleanup(func() {
			if cross := slots.crossSlot(); len(cross) > 0 {
				t.Errorf("commands that span slots: %v", cross)
			}
		})
		client = cc
	} else {
		opt := &redis.Options{Addr: c.Addrs[0], Username: c.Username, Password: c.Password, DB: c.DB,
			MaxRetries: retries, ContextTimeoutEnabled: c.ContextTimeout}
		if c.Quiet {
			// A retry, if go-redis made one, well within the test's timeout.
			opt.MinRetryBackoff, opt.MaxRetryBackoff = time.Millisecond, 5*time.Millisecond
		}
		client = redis.NewClient(opt)
	}
	if c.Commands != nil {
		client.AddHook(&countHook{n: c.Commands})
	}
	var once sync.Once
	closeClient := func() {
		once.Do(func() {
			if err := client.Close(); err != nil {
				t.Errorf("closing the go-redis client: %v", err)
			}
		})
	}
	t.Cleanup(closeClient)
	var opts []redisstore.Option
	if c.Prefix != "" {
		opts = append(opts, redisstore.WithPrefix(c.Prefix))
	}
	if c.Batching != 0 {
		opts = append(opts, redisstore.WithBatching(c.Batching))
	}
	return redisstore.New(client, opts...), closeClient
}

// countHook counts the commands a go-redis client sends.
type countHook struct{ n *atomic.Int64 }

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// slotHook checks, on the cluster client, that every script call names
// one key and every multi-key command stays in one slot (the server
// would answer CROSSSLOT otherwise), and counts the script calls.
type slotHook struct {
	scripts atomic.Int64
	mu      sync.Mutex
	cross   []string
}

func (h *slotHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *slotHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.check(cmd)
		return next(ctx, cmd)
	}
}

func (h *slotHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.check(cmd)
		}
		return next(ctx, cmds)
	}
}

func (h *slotHook) check(cmd redis.Cmder) {
	args := cmd.Args()
	var keys []any
	switch strings.ToLower(cmd.Name()) {
	case "evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro":
		h.scripts.Add(1)
		n, _ := strconv.Atoi(fmt.Sprint(args[2]))
		if n < 1 {
			h.fail(fmt.Sprintf("%s with %d keys", cmd.Name(), n))
		}
		keys = args[3 : 3+n]
	case "del", "unlink", "exists":
		keys = args[1:]
	}
	for _, k := range keys {
		if redistest.Slot(fmt.Sprint(k)) != redistest.Slot(fmt.Sprint(keys[0])) {
			h.fail(fmt.Sprintf("%v spans slots", args))
		}
	}
}

func (h *slotHook) fail(s string) {
	h.mu.Lock()
	h.cross = append(h.cross, s)
	h.mu.Unlock()
}

func (h *slotHook) crossSlot() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.cross...)
}

// redirectHook counts the ASK and MOVED redirects the nodes answered, and
// the TRYAGAIN answers (a call of several keys of a migrating slot, not
// all on one side).
type redirectHook struct{ r *redissuite.Redirects }

func (h *redirectHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *redirectHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.see(err)
		return err
	}
}

func (h *redirectHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.see(cmd.Err())
		}
		return err
	}
}

func (h *redirectHook) see(err error) {
	if _, ok := redis.IsAskError(err); ok {
		h.r.Ask.Add(1)
	}
	if _, ok := redis.IsMovedError(err); ok {
		h.r.Moved.Add(1)
	}
	if err != nil && strings.HasPrefix(err.Error(), "TRYAGAIN") {
		h.r.TryAgain.Add(1)
	}
}
