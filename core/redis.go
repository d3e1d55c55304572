package core

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed redis.lua
var libSource string

// The library runs as a Redis Function library where the server has them
// (Redis 7): its helpers are built once when it loads, not on every call.
// Older servers run it as scripts. Its name carries a hash of its text,
// so that instances running different versions of ratekit on one Redis
// each call their own.
var (
	libName = "ratekit_" + hex.EncodeToString(hashOf(libSource)[:6])
	libCode = "#!lua name=" + libName + "\n" +
		"local function register(name, f) redis.register_function('" + libName + "_' .. name, f) end\n" + libSource
	fnLog     = libName + "_log"
	fnBuckets = libName + "_buckets"

	logSource     = scriptOf("log")
	bucketsSource = scriptOf("buckets")
	logScript     = redis.NewScript(logSource)
	bucketsScript = redis.NewScript(bucketsSource)
)

// scriptOf returns the library as a script that runs its function name.
func scriptOf(name string) string {
	return "local fns = {}\nlocal function register(name, f) fns[name] = f end\n" + libSource +
		"\nreturn fns." + name + "(KEYS, ARGV)\n"
}

func hashOf(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

// defaultPrefix is the prefix of every key a RedisStore writes, unless
// WithPrefix sets another.
const defaultPrefix = "ratekit"

// defaultBatch is the most decisions one script call carries unless
// WithBatching sets another.
const defaultBatch = 64

// RedisStore is a [Store] on Redis, shared by every app instance that uses
// the same Redis. Each decision is made atomically by a Lua script on the
// one Redis key of its (policy, key), named <prefix>:<policy>:{<key>}; the
// braces are a Redis Cluster hash tag, so a decision touches one slot.
// Under SlidingLog the key is a string of the newest admission times, 8
// bytes each, so a decision reads a few of them whatever the limit; under
// SlidingBuckets it is a hash of bucket counts (":b" appended to the name).
//
// Time comes from the Redis server (TIME, in microseconds), so clock skew
// between app nodes cannot move the windows.
//
// Decisions made while others are in flight share script calls: one call
// decides a batch of them (one per Cluster slot), so a busy store spends a
// round trip and a script call per batch rather than per decision (see
// [WithBatching]).
//
// The script calls are never retried by go-redis, whose retries after a
// lost reply would run a decision twice: a call that fails is a store
// failure, which the [Limiter]'s failure policy resolves. Calls that
// Redis refused before running (a replica that is read-only after a
// failover, a cluster that is down or loading) are tried again while the
// caller's deadline allows.
//
// A caller waits for its answer on its own context, while the decision's
// reply is read by a goroutine of the store whatever the caller's
// timeout: so a paused Redis costs a request no more than the
// [Limiter]'s timeout, whatever the client's options (ContextTimeoutEnabled
// or not), and a reply that came while the process was too busy to read it
// is not lost (see [WithTimeout]). A RedisStore is safe for concurrent
// use. It does not close the client: the caller owns it.
type RedisStore struct {
	client    redis.UniversalClient
	cluster   bool // slot by slot
	prefix    string
	honorsCtx bool
	batch     *batcher
	scripts   atomic.Bool // the server has no FCALL: run the library as scripts
	watch     *watcher    // deny-cache invalidations between instances

	wall func() time.Time // the clock calendar periods are found around when Redis's decides; nil: time.Now

	waitReplicas int           // WithWaitReplicas; 0: off
	waitTimeout  time.Duration // WithWaitReplicas
	waits        atomic.Int64  // admitting takes that waited for replicas
	waitsShort   atomic.Int64  // ... and got fewer acknowledgements than asked
}

var _ Store = (*RedisStore)(nil)

// RedisOption configures a [RedisStore].
type RedisOption func(*redisOptions)

type redisOptions struct {
	prefix       string
	batch        int
	waitReplicas int
	waitTimeout  time.Duration
}

// WithBatching sets the most decisions one script call decides; 64 by
// default. Decisions made while others are in flight wait for a flight to
// take them, and each flight takes what has queued up to this many, so
// the batch grows with the load and a lone caller is sent at once. Each
// caller keeps its own timeout and failure policy. 1 turns batching off:
// one script call per decision. It must be between 1 and 1000.
func WithBatching(max int) RedisOption {
	return func(o *redisOptions) { o.batch = max }
}

// WithPrefix sets the prefix of every key; "ratekit" by default.
func WithPrefix(prefix string) RedisOption {
	return func(o *redisOptions) { o.prefix = prefix }
}

// WithWaitReplicas makes every Take that admits units wait until at
// least replicas replicas of the key's master have acknowledged the write,
// or timeout has passed (Redis WAIT, sent on the connection that ran the
// decision's script, because WAIT counts that connection's writes; on a
// Redis Cluster, on a connection to the key's master). Such takes are
// decided one script call each. Takes that admit nothing, Peek, Refund and
// Reset do not wait. Off by default.
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
	return func(o *redisOptions) {
		o.waitReplicas = replicas
		o.waitTimeout = timeout
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
// or on an invalid option: programmer errors caught at start-up.
func NewRedisStore(client redis.UniversalClient, opts ...RedisOption) *RedisStore {
	if client == nil {
		panic("ratekit: NewRedisStore: nil client")
	}
	o := redisOptions{prefix: defaultPrefix, batch: defaultBatch}
	for _, opt := range opts {
		opt(&o)
	}
	if o.batch < 1 || o.batch > 1000 {
		panic(fmt.Sprintf("ratekit: NewRedisStore: WithBatching(%d): must be within 1..1000", o.batch))
	}
	if o.waitReplicas < 0 {
		panic(fmt.Sprintf("ratekit: NewRedisStore: WithWaitReplicas replicas is %d, must be >= 0", o.waitReplicas))
	}
	s := &RedisStore{client: client, prefix: o.prefix, waitReplicas: o.waitReplicas, waitTimeout: o.waitTimeout}
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
	switch c := client.(type) {
	case *redis.Client:
		s.honorsCtx = c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		s.honorsCtx = c.Options().ContextTimeoutEnabled
		s.cluster = true
	default:
		// A Ring, or a client of another kind, may spread keys by its own
		// rules: every call carries one decision.
		o.batch = 1
	}
	s.batch = newBatcher(s, o.batch)
	s.watch = newWatcher(s)
	return s
}

// Key returns the Redis key that a limiter's decisions on key under
// policy use with SlidingLog: <prefix>:<policy>:{<key>}, the key hashed
// first when it is over 128 bytes. Under SlidingBuckets the Redis key has
// ":b" appended; a lockout (Policy.Lockout) is kept under ":l" appended,
// the counts of calendar rules (Rule.Calendar) under ":c" and the leases
// of an InFlight policy under ":lease", all in the same hash slot.
func (s *RedisStore) Key(policy, key string) string {
	return s.redisKey(policy, boundKey(key))
}

// wallNow returns this process's clock in µs.
func (s *RedisStore) wallNow() int64 {
	if s.wall != nil {
		return s.wall().UnixMicro()
	}
	return time.Now().UnixMicro()
}

func (s *RedisStore) redisKey(policy, bounded string) string {
	return s.prefix + ":" + policy + ":{" + bounded + "}"
}

func (s *RedisStore) keyOf(q *Query) string {
	if q.Algorithm == SlidingBuckets {
		return s.prefix + ":" + q.Policy + ":{" + q.Key + "}:b"
	}
	return s.redisKey(q.Policy, q.Key)
}

// Take implements [Store].
func (s *RedisStore) Take(ctx context.Context, q Query) (Result, error) {
	return s.result(ctx, &q, opTake)
}

// Peek implements [Store].
func (s *RedisStore) Peek(ctx context.Context, q Query) (Result, error) {
	return s.result(ctx, &q, opPeek)
}

func (s *RedisStore) result(ctx context.Context, q *Query, op byte) (Result, error) {
	var st states
	allowed, at, err := s.decide(ctx, q, op, 0, &st)
	if err != nil {
		return Result{}, err
	}
	return Result{Allowed: allowed, At: at, Rules: append([]RuleState(nil), st.slice()...), LockedFor: st.lock}, nil
}

// Refund implements [Store].
func (s *RedisStore) Refund(ctx context.Context, q Query, at int64) error {
	_, _, err := s.decide(ctx, &q, opRefund, at, nil)
	return err
}

// decide runs one operation of q, waiting for its answer until ctx ends,
// and writes the rule states to st (nil for a refund).
func (s *RedisStore) decide(ctx context.Context, q *Query, op byte, at int64, st *states) (allowed bool, when int64, err error) {
	if q.Algorithm != SlidingLog && q.Algorithm != SlidingBuckets {
		return false, 0, fmt.Errorf("ratekit: redis store: algorithm %v: %w", q.Algorithm, ErrInvalidPolicy)
	}
	if err := ctx.Err(); err != nil {
		return false, 0, fmt.Errorf("ratekit: redis store: %w", err)
	}
	c := getCall()
	c.op, c.algo, c.n, c.now, c.at, c.rules = op, q.Algorithm, q.N, q.Now, at, q.Rules
	c.key = s.keyOf(q)
	c.cap = q.Keep
	for _, r := range q.Rules {
		if r.Calendar != 0 {
			if r.Calendar > Month {
				putCall(c)
				return false, 0, fmt.Errorf("ratekit: redis store: %w", checkCalendars(q.Rules))
			}
			c.more = true
			continue
		}
		c.cap = max(c.cap, r.Limit)
	}
	if q.Lockout.For > 0 {
		c.more, c.lock = true, q.Lockout
	}
	if c.more {
		switch {
		case op == opRefund:
			c.cal = at
		case q.Now != 0:
			c.cal = q.Now
		default:
			// The server's clock decides: the script picks the period by
			// it from boundaries around this one's.
			c.cal = s.wallNow()
		}
	}
	if q.Algorithm == SlidingBuckets {
		c.bw = make([]int64, len(q.Rules))
		for i, r := range q.Rules {
			c.bw[i] = q.bucketWidth(r)
		}
	}
	if s.cluster {
		c.slot = slotOf(c.key)
	}
	if op == opTake && s.waitReplicas > 0 {
		s.runAndWait(ctx, c)
	} else if err := s.batch.do(ctx, c); err != nil {
		// The caller gave up; the flight still owns c.
		return false, 0, fmt.Errorf("ratekit: redis store: %w", err)
	}
	allowed, when, err = c.allowed, c.when, c.err
	if st != nil && err == nil {
		*st = c.states
	}
	putCall(c)
	if err != nil {
		return false, 0, fmt.Errorf("ratekit: redis store: %w", err)
	}
	return allowed, when, nil
}

// Reset implements [Store].
func (s *RedisStore) Reset(ctx context.Context, q Query) error {
	k := s.redisKey(q.Policy, q.Key)
	_, err := bounded(ctx, func(ctx context.Context) (struct{}, error) {
		// Then every instance forgets its cached denials of the key.
		_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Del(ctx, k, k+":b", k+":l", k+":c", k+":lease")
			p.Publish(ctx, s.watch.channel, k)
			return nil
		})
		return struct{}{}, err
	})
	if err != nil {
		return fmt.Errorf("ratekit: redis store: reset: %w", err)
	}
	return nil
}

// noRetry is a script call that go-redis must not retry: a retry after a
// lost reply would run the decisions twice.
type noRetry struct{ *redis.StringCmd }

func (noRetry) NoRetry() bool { return true }

// flight sends the calls of one batch in one round trip, one script call
// per slot and algorithm, and writes every call's answer (or error).
func (s *RedisStore) flight(ctx context.Context, calls []*rcall) {
	cmds := s.commands(ctx, calls)
	_ = s.exec(ctx, cmds, s.client) // each command carries its own error
	for _, c := range calls {
		c.replied.Store(true)
	}
	for i := range cmds {
		cmds[i].answer()
	}
}

// exec runs cmds on c: one command as it is, several in a pipeline. A
// command that met NOSCRIPT (a restarted or flushed Redis, a replica just
// promoted) is sent again with the script's source, which loads it; one
// that Redis refused before running it is sent again after a pause; both
// while ctx allows, a few times at most. A client that ignores ctx may
// hold exec past ctx's deadline; the callers are not held, they wait on
// their own contexts.
func (s *RedisStore) exec(ctx context.Context, cmds []batchCmd, c processor) error {
	for attempt := 0; ; attempt++ {
		var err error
		if len(cmds) == 1 {
			err = c.Process(ctx, cmds[0].cmd)
		} else {
			p := c.Pipeline()
			for i := range cmds {
				_ = p.Process(ctx, cmds[i].cmd)
			}
			_, err = p.Exec(ctx)
		}
		if err == nil || attempt >= 4 || ctx.Err() != nil {
			return err
		}
		again, pause, load := false, false, false
		for i := range cmds {
			switch e := cmds[i].cmd.Err(); {
			case isNoScript(e):
				cmds[i].eval = true
			case redis.HasErrorPrefix(e, "Function not found"):
				load = true
			case redis.HasErrorPrefix(e, "OOM") && !cmds[i].script && !s.scripts.Load():
				// A full Redis refuses every function call up front; a
				// script is refused only when it writes, so that denials
				// are still decided by the store.
				cmds[i].script = true
			case isUnknownCommand(e) || redis.HasErrorPrefix(e, "NOPERM") && !cmds[i].script && !s.scripts.Load():
				// A server before Redis 7, or an ACL that does not permit
				// FCALL: scripts from now on.
				s.scripts.Store(true)
			case refusedBeforeRunning(e):
				pause = true
			default:
				continue
			}
			again = true
		}
		if load && s.loadLibrary(ctx, c) != nil {
			// The server refuses FUNCTION LOAD (an ACL, a managed
			// service): scripts from now on.
			s.scripts.Store(true)
		}
		if !again {
			return err
		}
		if pause {
			d := time.Duration(1<<attempt) * 5 * time.Millisecond
			if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
				return err
			}
			time.Sleep(d)
		}
		// Only commands sent again are rebuilt: the others keep their
		// error for answer.
		for i := range cmds {
			if cmds[i].cmd.Err() != nil {
				cmds[i].cmd = s.command(ctx, cmds[i].calls, cmds[i].script, cmds[i].eval)
			}
		}
	}
}

// isUnknownCommand reports the error of a server that lacks FCALL.
func isUnknownCommand(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "unknown command")
}

// loadLibrary loads the library into the server c talks to, or into
// every master of a cluster.
func (s *RedisStore) loadLibrary(ctx context.Context, c processor) error {
	load := func(ctx context.Context, c redis.Cmdable) error {
		err := c.FunctionLoad(ctx, libCode).Err()
		if err != nil && strings.Contains(err.Error(), "already exists") {
			return nil // loaded meanwhile
		}
		return err
	}
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return load(ctx, n) })
	}
	if cm, ok := c.(redis.Cmdable); ok {
		return load(ctx, cm)
	}
	return nil
}

// processor runs commands: a client or one of its connections.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
	Pipeline() redis.Pipeliner
}

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

// refusedBeforeRunning reports errors with which Redis refuses a command
// without running it, so sending it again cannot count twice.
func refusedBeforeRunning(err error) bool {
	if err == nil {
		return false
	}
	for _, p := range []string{"READONLY", "LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "NOREPLICAS"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}

// batchCmd is one script call of a flight and the calls it decides.
type batchCmd struct {
	cmd    noRetry
	calls  []*rcall
	script bool // sent as a script even where the server has functions
	eval   bool // a script sent with its source (EVAL), not its hash
}

// commands groups calls into script calls: one per algorithm and (on a
// Cluster) per slot, in the order the calls came.
func (s *RedisStore) commands(ctx context.Context, calls []*rcall) []batchCmd {
	if len(calls) == 1 {
		c := calls[0]
		c.one[0] = batchCmd{cmd: s.command(ctx, calls, false, false), calls: calls}
		return c.one[:]
	}
	var groups []batchCmd
	for _, c := range calls {
		found := false
		for i := range groups {
			g := groups[i].calls[0]
			if g.algo == c.algo && (!s.cluster || g.slot == c.slot) {
				groups[i].calls = append(groups[i].calls, c)
				found = true
				break
			}
		}
		if !found {
			groups = append(groups, batchCmd{calls: []*rcall{c}})
		}
	}
	for i := range groups {
		groups[i].cmd = s.command(ctx, groups[i].calls, false, false)
	}
	return groups
}

// command builds the call deciding calls, all of one algorithm: FCALL of
// the library's function, or where the server has none EVALSHA of the
// script, or EVAL with its source when eval is set.
func (s *RedisStore) command(ctx context.Context, calls []*rcall, script, eval bool) noRetry {
	if calls[0].algo == leaseAlgo {
		return leaseCommand(ctx, calls, eval)
	}
	sc, src, fn := logScript, logSource, fnLog
	if calls[0].algo == SlidingBuckets {
		sc, src, fn = bucketsScript, bucketsSource, fnBuckets
	}
	// The first call's buffers carry the command: go-redis is done with
	// them when the flight is, and a call whose caller gave up stays
	// with its flight, out of the pool.
	lead := calls[0]
	blob, args := lead.blob.b[:0], lead.args[:0]
	if len(calls) > 1 {
		size := 0
		for _, c := range calls {
			size += 8 * (7 + 3*len(c.rules))
			if c.more {
				size += 8 * (3 + 6*len(c.rules))
			}
		}
		blob = slices.Grow(blob, size)
		args = slices.Grow(args, 5+len(calls))
	}
	switch {
	case !script && !s.scripts.Load():
		args = append(args, "fcall", fn)
	case eval:
		args = append(args, "eval", src)
	default:
		args = append(args, "evalsha", sc.Hash())
	}
	args = append(args, len(calls))
	for _, c := range calls {
		args = append(args, c.key)
		op, nr := c.op, len(c.rules)
		if c.more {
			op += opMore
			nr -= calendarRules(c.rules)
		}
		blob = appendFloat(blob, float64(op), float64(c.n))
		if c.algo == SlidingLog {
			blob = appendFloat(blob, float64(c.cap))
		}
		blob = appendFloat(blob, float64(c.now), float64(nr))
		for i, r := range c.rules {
			if r.Calendar != 0 {
				continue
			}
			blob = appendFloat(blob, float64(r.Limit), float64(r.Window.Microseconds()))
			if c.algo == SlidingBuckets {
				blob = appendFloat(blob, float64(c.bw[i]))
			}
		}
		if c.op == opRefund {
			blob = appendFloat(blob, float64(c.at))
		}
		if c.more {
			blob = c.appendMore(blob)
		}
	}
	lead.blob.b = blob
	args = append(args, &lead.blob)
	if calls[0].op == opRefund || hasRefund(calls) {
		args = append(args, s.watch.channel)
	}
	lead.args = args
	return noRetry{redis.NewStringCmd(ctx, args...)}
}

// appendMore packs the lockout and calendar rules of c (see redis.lua).
func (c *rcall) appendMore(b []byte) []byte {
	b = appendFloat(b, float64(c.lock.For.Microseconds()), float64(c.lock.Max.Microseconds()), float64(calendarRules(c.rules)))
	for _, r := range c.rules {
		if r.Calendar == 0 {
			continue
		}
		bd := r.Calendar.bounds(r.Location, c.cal)
		b = appendFloat(b, float64(r.Limit), float64(r.Calendar), float64(bd[0]), float64(bd[1]), float64(bd[2]), float64(bd[3]))
	}
	return b
}

// calendarRules returns how many of rules are calendar rules.
func calendarRules(rules []Rule) int {
	n := 0
	for i := range rules {
		if rules[i].Calendar != 0 {
			n++
		}
	}
	return n
}

func hasRefund(calls []*rcall) bool {
	for _, c := range calls {
		if c.op == opRefund {
			return true
		}
	}
	return false
}

func appendFloat(b []byte, vs ...float64) []byte {
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
	}
	return b
}

// answer decodes the reply of a script call into its calls.
func (b *batchCmd) answer() {
	reply, err := b.cmd.Result()
	if err != nil {
		for _, c := range b.calls {
			c.err = err
		}
		return
	}
	r := reply
	next := func() float64 {
		if len(r) < 8 {
			err = errShortReply
			return 0
		}
		v := uint64(r[0]) | uint64(r[1])<<8 | uint64(r[2])<<16 | uint64(r[3])<<24 |
			uint64(r[4])<<32 | uint64(r[5])<<40 | uint64(r[6])<<48 | uint64(r[7])<<56
		r = r[8:]
		return math.Float64frombits(v)
	}
	for _, c := range b.calls {
		if err != nil {
			c.err = err
			continue
		}
		status, when := next(), next()
		if err != nil {
			c.err = err
			continue
		}
		if status < 0 {
			n := min(int(when), len(r))
			c.err = &keyError{msg: strings.TrimSpace(r[:n])}
			r = r[n:]
			continue
		}
		c.allowed, c.when = status == 1, int64(when)
		if c.op == opRefund {
			continue
		}
		c.states.n = len(c.rules)
		var more []RuleState
		if len(c.rules) > inlineRules {
			more = make([]RuleState, len(c.rules))
		}
		rs := c.states.a[:]
		if more != nil {
			rs = more
		}
		for i, rl := range c.rules {
			if rl.Calendar != 0 {
				continue // after the sliding rules
			}
			rs[i] = RuleState{Limit: rl.Limit, Window: rl.Window, Used: int64(next()),
				RetryAfter: time.Duration(next()) * time.Microsecond, ResetAfter: time.Duration(next()) * time.Microsecond}
		}
		c.states.more = more
		c.states.lock = 0
		if c.more {
			for i, rl := range c.rules {
				if rl.Calendar != 0 {
					rs[i] = RuleState{Limit: rl.Limit, Calendar: rl.Calendar, Used: int64(next()),
						RetryAfter: time.Duration(next()) * time.Microsecond, ResetAfter: time.Duration(next()) * time.Microsecond,
						Window: time.Duration(next()) * time.Microsecond}
				}
			}
			c.states.lock = time.Duration(next()) * time.Microsecond
		}
		if err != nil {
			c.err = err
		}
	}
}

var errShortReply = errors.New("script reply too short")

// keyError is the failure of one key's decision in a script call that
// decided the others: a key holding another type, say. It says nothing
// of the store's health.
type keyError struct{ msg string }

func (e *keyError) Error() string { return "script: " + e.msg }

// runAndWait runs a take alone on one connection of the key's master and,
// when it admitted units, WAIT on that same connection
// ([WithWaitReplicas]).
func (s *RedisStore) runAndWait(ctx context.Context, c *rcall) {
	// The work runs on a copy of c: a client that ignores ctx may still
	// be writing the copy's answer after bounded has returned.
	// Nor does the copy share the buffers c takes back to the pool.
	w := &rcall{op: c.op, key: c.key, slot: c.slot, algo: c.algo, n: c.n, cap: c.cap, now: c.now, at: c.at,
		rules: c.rules, bw: c.bw, lease: c.lease, more: c.more, lock: c.lock, cal: c.cal}
	done, _ := bounded(ctx, func(ctx context.Context) (*rcall, error) {
		c := w
		var node *redis.Client
		switch cl := s.client.(type) {
		case *redis.ClusterClient:
			n, err := cl.MasterForKey(ctx, c.key)
			if err != nil {
				c.err = err
				return c, nil
			}
			node = n
		case *redis.Client:
			node = cl
		}
		conn := node.Conn()
		defer conn.Close()
		cmds := s.commands(ctx, []*rcall{c})
		err := s.exec(ctx, cmds, conn)
		_, moved := redis.IsMovedError(err)
		_, ask := redis.IsAskError(err)
		if moved || ask {
			// The key's slot moved or is moving: the cluster client
			// follows the redirect; this decision does not wait.
			cmds[0].cmd = s.command(ctx, cmds[0].calls, cmds[0].script, cmds[0].eval)
			_ = s.exec(ctx, cmds, s.client)
			cmds[0].answer()
			if c.err == nil && c.allowed {
				s.waits.Add(1)
				s.waitsShort.Add(1)
			}
			return c, nil
		}
		cmds[0].answer()
		if c.err != nil || !c.allowed {
			return c, nil
		}
		s.waits.Add(1)
		acked, err := conn.Wait(ctx, s.waitReplicas, s.waitTimeout).Result()
		if err != nil || acked < int64(s.waitReplicas) {
			s.waitsShort.Add(1)
		}
		return c, nil
	})
	if done == nil {
		c.err = ctx.Err()
		return
	}
	c.allowed, c.when, c.states, c.err = done.allowed, done.when, done.states, done.err
	if c.err == nil && ctx.Err() != nil && !c.allowed && c.when == 0 {
		c.err = ctx.Err()
	}
}

// bounded runs f on a goroutine of its own and returns by the end of
// ctx, even when the client ignores ctx: the caller waits on ctx, f's I/O
// is bounded by ctx's deadline alone, so that a reply that came while the
// process was too busy to read it is not lost to the caller's timeout.
// An answer there when ctx ends is taken. A call abandoned when ctx ends
// finishes in the background within that deadline (or the client's own
// read timeout); the Limiter's circuit breaker keeps such calls few while
// Redis is unreachable. f's context carries the values of the caller's
// context, not its cancellation.
func bounded[T any](ctx context.Context, f func(ctx context.Context) (T, error)) (T, error) {
	if ctx.Done() == nil {
		return f(ctx)
	}
	parent := ctx
	if c, ok := ctx.(*callCtx); ok {
		parent = c.Context // a callCtx is reused once the call returns
	}
	wctx, cancel := context.WithoutCancel(parent), context.CancelFunc(func() {})
	if dl, ok := ctx.Deadline(); ok {
		wctx, cancel = context.WithDeadline(wctx, dl)
	}
	type reply struct {
		v   T
		err error
	}
	ch := make(chan reply, 1)
	go func() {
		defer cancel()
		v, err := f(wctx)
		ch <- reply{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		select {
		case r := <-ch:
			return r.v, r.err
		default:
		}
		var zero T
		return zero, ctx.Err()
	}
}

// slotOf returns the Redis Cluster hash slot of key.
func slotOf(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key) % 16384)
}

// crc16 is CRC-16/XMODEM, the hash of Redis Cluster slots.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
