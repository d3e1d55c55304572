package core

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed redis.lua
var slidingLogSource string

//go:embed redis_refund.lua
var refundSource string

//go:embed redis_buckets.lua
var bucketsSource string

//go:embed redis_prelude.lua
var preludeSource string

var (
	slidingLogScript = redis.NewScript(preludeSource + slidingLogSource)
	refundScript     = redis.NewScript(refundSource)
	bucketsScript    = redis.NewScript(preludeSource + bucketsSource)
)

// defaultPrefix is the prefix of every key a RedisStore writes, unless
// WithPrefix sets another.
const defaultPrefix = "ratekit"

// RedisStore is a [Store] on Redis, shared by every app instance that uses
// the same Redis. Each decision is one Lua script call (EVALSHA, reloaded
// on NOSCRIPT) on one ZSET per (policy, key), named
// <prefix>:<policy>:{<key>}; the braces are a Redis Cluster hash tag.
//
// Time comes from the Redis server (TIME, in microseconds), so clock skew
// between app nodes cannot move the windows. The script is idempotent per
// call, so a go-redis retry after a lost reply is counted once.
//
// go-redis ignores context deadlines unless the client was built with
// ContextTimeoutEnabled; RedisStore therefore enforces the caller's
// deadline itself when the client does not, so a paused Redis costs a
// request no more than the [Limiter]'s timeout. A RedisStore is safe for
// concurrent use. It does not close the client: the caller owns it.
type RedisStore struct {
	client    redis.UniversalClient
	prefix    string
	honorsCtx bool

	pipeline int                  // WithPipelining threshold; 0: off
	ap       *redis.AutoPipeliner // nil: every call on its own round trip
	inflight atomic.Int64         // script calls in flight

	waitReplicas int           // WithWaitReplicas; 0: off
	waitTimeout  time.Duration // WithWaitReplicas
	waits        atomic.Int64  // admitting takes that waited for replicas
	waitsShort   atomic.Int64  // ... and got fewer acknowledgements than asked
}

// RedisOption configures a [RedisStore].
type RedisOption func(*RedisStore)

// defaultPipelineThreshold is the number of decisions in flight on one
// RedisStore above which further decisions share round trips, unless
// WithPipelining sets another.
const defaultPipelineThreshold = 4

// WithPipelining coalesces concurrent decisions into shared round trips
// (go-redis auto-pipelining) once more than threshold decisions are in
// flight on the store; below it, each decision is its own round trip, so
// a lone caller's latency is unchanged. 4 by
// default; 0 turns it off. Each caller keeps its own timeout and failure
// policy: a decision whose shared round trip is late falls back alone.
// Pipelining needs a *redis.Client (standalone or Sentinel failover) or a
// *redis.ClusterClient; with other clients it is off. The pipeliner's
// goroutines end when the client is closed.
func WithPipelining(threshold int) RedisOption {
	return func(s *RedisStore) { s.pipeline = threshold }
}

// WithPrefix sets the prefix of every key; "ratekit" by default.
func WithPrefix(prefix string) RedisOption {
	return func(s *RedisStore) { s.prefix = prefix }
}

// WithWaitReplicas makes every Take that admits units wait until at
// least replicas replicas of the key's master have acknowledged the write,
// or timeout has passed (Redis WAIT, sent on the connection that ran the
// decision's script, because WAIT counts that connection's writes; on a
// Redis Cluster, on a connection to the key's master). Takes that admit
// nothing, Peek, Refund and Reset do not wait. Off by default.
//
// Replication is asynchronous: when a master dies, the replica promoted
// in its place may lack the last admissions the master made, so those
// units are admitted once more (see the README on failover). Waiting
// closes that window for every decision whose write reached replicas
// replicas in time; it does not close it for the decisions in flight when
// the master dies, nor for those that timed out: such a decision is still
// returned as the store decided it (the write happened on the master),
// and is counted by [RedisStore.ReplicaWaits]. It costs every admission a
// replication round trip, so timeout must stay well below the Limiter's
// [WithTimeout], or a slow replica turns admissions into fallbacks.
//
// It works with a *redis.Client (standalone or Sentinel failover) and a
// *redis.ClusterClient; [NewRedisStore] panics with other clients, with
// replicas < 0, and with replicas > 0 and timeout < 1 ms (WAIT 0 would
// wait forever). replicas 0 turns it off.
func WithWaitReplicas(replicas int, timeout time.Duration) RedisOption {
	return func(s *RedisStore) {
		s.waitReplicas = replicas
		s.waitTimeout = timeout
	}
}

// ReplicaWaits reports, for a store built [WithWaitReplicas], how many
// admitting Takes waited for replicas, and how many of them were
// acknowledged by fewer replicas than asked (WAIT timed out, failed, or
// the decision was redirected during a cluster slot migration). The
// writes of the short ones may be lost by a failover.
func (s *RedisStore) ReplicaWaits() (waits, short int64) {
	return s.waits.Load(), s.waitsShort.Load()
}

// NewRedisStore returns a store on client: a *redis.Client, a Sentinel
// failover client or a *redis.ClusterClient. It panics if client is nil,
// or on an invalid [WithWaitReplicas]: programmer errors caught at
// start-up.
func NewRedisStore(client redis.UniversalClient, opts ...RedisOption) *RedisStore {
	if client == nil {
		panic("ratekit: NewRedisStore: nil client")
	}
	s := &RedisStore{client: client, prefix: defaultPrefix, pipeline: defaultPipelineThreshold}
	for _, opt := range opts {
		opt(s)
	}
	if s.pipeline < 0 {
		panic(fmt.Sprintf("ratekit: NewRedisStore: WithPipelining threshold is %d, must be >= 0", s.pipeline))
	}
	if s.waitReplicas < 0 {
		panic(fmt.Sprintf("ratekit: NewRedisStore: WithWaitReplicas replicas is %d, must be >= 0", s.waitReplicas))
	}
	if s.waitReplicas > 0 {
		if s.waitTimeout < time.Millisecond {
			panic(fmt.Sprintf("ratekit: NewRedisStore: WithWaitReplicas timeout is %v, must be at least 1ms", s.waitTimeout))
		}
		switch client.(type) {
		case *redis.Client, *redis.ClusterClient:
		default:
			panic(fmt.Sprintf("ratekit: NewRedisStore: WithWaitReplicas needs a *redis.Client or *redis.ClusterClient, not %T", client))
		}
	}
	var err error
	switch c := client.(type) {
	case *redis.Client:
		s.honorsCtx = c.Options().ContextTimeoutEnabled
		if s.pipeline > 0 {
			s.ap, err = c.AutoPipeline()
		}
	case *redis.ClusterClient:
		s.honorsCtx = c.Options().ContextTimeoutEnabled
		if s.pipeline > 0 {
			s.ap, err = c.AutoPipeline()
		}
	}
	if err != nil {
		// A closed client or an invalid pipelining configuration on the
		// client: decide one round trip at a time.
		s.ap = nil
	}
	return s
}

// scripter returns what the next script call runs on, and whether that
// honours the call's context: the auto-pipeliner when enough calls are in
// flight (it runs batches on its own context), else the client. The
// caller must call done when the script call has returned.
func (s *RedisStore) scripter() (sc redis.Scripter, honorsCtx bool, done func()) {
	n := s.inflight.Add(1)
	if s.ap != nil && n > int64(s.pipeline) {
		return s.ap, false, s.release
	}
	return s.client, s.honorsCtx, s.release
}

func (s *RedisStore) release() { s.inflight.Add(-1) }

// Key returns the Redis key that a limiter's decisions on key under
// policy use with SlidingLog: <prefix>:<policy>:{<key>}, the key hashed
// first when it is over 128 bytes. Under SlidingBuckets the Redis key has
// ":b" appended (same hash slot).
func (s *RedisStore) Key(policy, key string) string {
	return s.redisKey(policy, boundKey(key))
}

func (s *RedisStore) redisKey(policy, bounded string) string {
	return s.prefix + ":" + policy + ":{" + bounded + "}"
}

func (s *RedisStore) keyOf(q *Query) string {
	if q.Algorithm == SlidingBuckets {
		return s.redisKey(q.Policy, q.Key) + ":b"
	}
	return s.redisKey(q.Policy, q.Key)
}

// Take implements [Store].
func (s *RedisStore) Take(ctx context.Context, q Query) (Result, error) {
	return s.eval(ctx, q, true)
}

// Peek implements [Store].
func (s *RedisStore) Peek(ctx context.Context, q Query) (Result, error) {
	return s.eval(ctx, q, false)
}

func (s *RedisStore) eval(ctx context.Context, q Query, take bool) (Result, error) {
	script := slidingLogScript
	switch q.Algorithm {
	case SlidingLog:
	case SlidingBuckets:
		script = bucketsScript
	default:
		return Result{}, fmt.Errorf("ratekit: redis store: algorithm %v: %w", q.Algorithm, ErrInvalidPolicy)
	}
	args := make([]any, 0, 4+3*len(q.Rules))
	mode := "0"
	if take {
		mode = "1"
	}
	now := ""
	if q.Now != 0 {
		now = strconv.FormatInt(q.Now, 10)
	}
	args = append(args, mode, q.N, q.ID, now)
	for _, r := range q.Rules {
		args = append(args, r.Limit, r.Window.Microseconds())
		if q.Algorithm == SlidingBuckets {
			args = append(args, q.bucketWidth(r))
		}
	}
	keys := []string{s.keyOf(&q)}
	if take && s.waitReplicas > 0 {
		reply, err := bounded(ctx, s.honorsCtx, func() ([]int64, error) {
			return s.runAndWait(ctx, script, keys, args)
		})
		return s.result(q, reply, err)
	}
	sc, honors, done := s.scripter()
	reply, err := bounded(ctx, honors, func() ([]int64, error) {
		defer done()
		return script.Run(ctx, sc, keys, args...).Int64Slice()
	})
	return s.result(q, reply, err)
}

// result turns a script reply into a Result.
func (s *RedisStore) result(q Query, reply []int64, err error) (Result, error) {
	if err != nil {
		return Result{}, fmt.Errorf("ratekit: redis store: %w", err)
	}
	if len(reply) != 2+3*len(q.Rules) {
		return Result{}, fmt.Errorf("ratekit: redis store: script replied %d values, want %d", len(reply), 2+3*len(q.Rules))
	}
	res := Result{Allowed: reply[0] == 1, At: reply[1], Rules: make([]RuleState, len(q.Rules))}
	for i, r := range q.Rules {
		v := reply[2+3*i:]
		res.Rules[i] = RuleState{
			Limit:      r.Limit,
			Window:     r.Window,
			Used:       v[0],
			RetryAfter: time.Duration(v[1]) * time.Microsecond,
			ResetAfter: time.Duration(v[2]) * time.Microsecond,
		}
	}
	return res, nil
}

// runAndWait runs a take's script on one connection of the key's master
// and, when it admitted units, WAIT on that same connection
// ([WithWaitReplicas]).
func (s *RedisStore) runAndWait(ctx context.Context, script *redis.Script, keys []string, args []any) ([]int64, error) {
	var node *redis.Client
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		n, err := c.MasterForKey(ctx, keys[0])
		if err != nil {
			return nil, err
		}
		node = n
	case *redis.Client:
		node = c
	}
	conn := node.Conn()
	defer conn.Close()
	reply, err := script.Run(ctx, conn, keys, args...).Int64Slice()
	if err != nil {
		_, moved := redis.IsMovedError(err)
		_, ask := redis.IsAskError(err)
		if !moved && !ask {
			return nil, err
		}
		// The key's slot moved or is moving: the cluster client follows
		// the redirect; this decision does not wait.
		reply, err = script.Run(ctx, s.client, keys, args...).Int64Slice()
		if err == nil && len(reply) > 0 && reply[0] == 1 {
			s.waits.Add(1)
			s.waitsShort.Add(1)
		}
		return reply, err
	}
	if len(reply) == 0 || reply[0] != 1 {
		return reply, nil
	}
	s.waits.Add(1)
	acked, err := conn.Wait(ctx, s.waitReplicas, s.waitTimeout).Result()
	if err != nil || acked < int64(s.waitReplicas) {
		s.waitsShort.Add(1)
	}
	return reply, nil
}

// Refund implements [Store].
func (s *RedisStore) Refund(ctx context.Context, q Query, at int64) error {
	keys := []string{s.keyOf(&q)}
	_, err := bounded(ctx, s.honorsCtx, func() (any, error) {
		if q.Algorithm == SlidingBuckets {
			args := []any{"r", q.N, q.ID, at}
			for _, r := range q.Rules {
				args = append(args, r.Limit, r.Window.Microseconds(), q.bucketWidth(r))
			}
			return bucketsScript.Run(ctx, s.client, keys, args...).Result()
		}
		return refundScript.Run(ctx, s.client, keys, q.ID, q.N).Result()
	})
	if err != nil {
		return fmt.Errorf("ratekit: redis store: refund: %w", err)
	}
	return nil
}

// Reset implements [Store].
func (s *RedisStore) Reset(ctx context.Context, q Query) error {
	k := s.redisKey(q.Policy, q.Key)
	_, err := bounded(ctx, s.honorsCtx, func() (int64, error) {
		if c, ok := s.client.(*redis.ClusterClient); ok {
			// One DEL per key: a key that empties the hash tag ("" or
			// one starting with "}") puts the two in different slots,
			// which a cluster refuses in one DEL (CROSSSLOT).
			cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.Del(ctx, k)
				p.Del(ctx, k+":b")
				return nil
			})
			if err != nil {
				return 0, err
			}
			return cmds[0].(*redis.IntCmd).Val() + cmds[1].(*redis.IntCmd).Val(), nil
		}
		return s.client.Del(ctx, k, k+":b").Result()
	})
	if err != nil {
		return fmt.Errorf("ratekit: redis store: reset: %w", err)
	}
	return nil
}

// bounded runs f, returning by ctx's deadline even when the client ignores
// it. A call abandoned that way finishes in the background within the
// client's own read timeout; the Limiter's circuit breaker keeps such calls
// few while Redis is unreachable.
func bounded[T any](ctx context.Context, honorsCtx bool, f func() (T, error)) (T, error) {
	if honorsCtx || ctx.Done() == nil {
		return f()
	}
	type reply struct {
		v   T
		err error
	}
	ch := make(chan reply, 1)
	go func() {
		v, err := f()
		ch <- reply{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}
