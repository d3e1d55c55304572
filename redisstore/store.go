package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/internal/redislib"
)

// defaultBatch is the most decisions one script call carries unless
// WithBatching sets another.
const defaultBatch = 64

// Store is a [driver.Store] on Redis through go-redis, shared by every app
// instance that uses the same Redis. Each decision is made atomically by
// ratekit's Lua library on the one Redis key of its (policy, key), named
// <prefix>:<policy>:{<key>}; the braces are a Redis Cluster hash tag, so
// a decision touches one slot. Under SlidingLog the key is a string of the
// newest admission times, 8 bytes each, so a decision reads a few of
// them whatever the limit; under SlidingBuckets it is a hash of bucket
// counts (":b" appended to the name).
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
// failure, which the [core.Limiter]'s failure policy resolves. Calls that
// Redis refused before running (a replica that is read-only after a
// failover, a cluster that is down or loading) are tried again while the
// caller's deadline allows.
//
// A caller waits for its answer on its own context, while the decision's
// reply is read by a goroutine of the store whatever the caller's
// timeout: so a paused Redis costs a request no more than the Limiter's
// timeout, whatever the client's options (ContextTimeoutEnabled or not),
// and a reply that came while the process was too busy to read it is not
// lost (see core.WithTimeout). On a *redis.Client with
// ContextTimeoutEnabled (and no TLS), a lone caller (nothing queued, no
// call in flight) skips that hand-off and reads its own reply, with the
// same promises: its read goes on while its context lasts or a reply
// waits unread in the socket, and ends when its context does.
//
// On a Redis Cluster the store keeps the Cluster's slot map (CLUSTER
// SLOTS: loaded at its first use, again every five seconds while it is
// used, and sooner after a redirect or a failed connection it sees), and
// batches each master's decisions apart, on goroutines and a bounded
// queue of that master's own: a master that stops answering holds up its
// own keys' decisions only, whatever the client's options, and
// [Store.Partition] names the master, so that a limiter's circuit
// breakers follow the masters. Until the map is loaded, decisions share
// one batcher and partitions are fixed groups of 256 slots. The map only
// routes: each command goes where go-redis's own map says. A flight of
// several script calls goes in one pipeline to the client of their
// master, and a call that master redirects (MOVED, ASK) is sent again at
// once through the cluster client, which follows the redirect: go-redis's
// own cluster pipelines pause ClusterOptions.MinRetryBackoff (8 ms or
// more) before they follow one, longer than a limiter's default timeout.
// A script call deciding several keys of a slot that is migrating, which
// Redis refuses with TRYAGAIN once the keys are split between the two
// nodes, is sent again at once one key per call, each following its own
// redirect. So hooks added to the ClusterClient see the calls sent alone,
// and the hooks of the masters' clients (OnNewNode) see every call.
//
// A connection to a node that fails (refused, reset) makes the store load
// the slot map, and go-redis its own, at once and every 200 ms while such
// failures go on: the replica the Cluster promotes in place of a master
// that died decides its keys as soon as the Cluster agrees on it, not at
// go-redis's periodic reload (a minute apart by default), which is the
// first go-redis makes by itself after the failure of a script call.
//
// A Store offers every optional capability of the core package: leases
// ([driver.Leases]), challenges ([driver.Challenges]), invalidations
// between instances over pub/sub ([driver.Invalidator]), the count of
// instances ([driver.Fleet]), breakers per Cluster master
// ([driver.Partitioned]), a check of the server ([driver.Checker]) and the
// keys refused most, summed over the instances ([driver.Refusals]). It is
// safe for concurrent use. It does not close the client: the caller owns
// it.
//
// An app calls [Store.Check], [Store.Close], [Store.Key] and
// [Store.ReplicaWaits]; the other methods implement the driver contract
// (package core/driver) for the limiters: Take, Peek, Refund, Reset and
// the rest are not meant for an app.
type Store struct {
	leases    *redislib.Leases // driver.Leases, made once
	client    redis.UniversalClient
	cluster   bool // slot by slot
	prefix    string
	honorsCtx bool
	batch     *redislib.Batcher // on a single node (and a Ring)
	nodes     *redislib.Nodes   // on a Cluster: a batcher per master
	scripts   atomic.Bool       // the server has no FCALL: run the library as scripts
	prune     sync.Once         // the libraries no instance runs are deleted (pruned)
	watch     *watcher          // invalidations between instances, and the fleet
	replies   replies           // the connections dialled, for Answered

	inlineOK    bool          // a lone caller may run its own flight (see inline)
	readTimeout time.Duration // the client's ReadTimeout, after go-redis's defaults

	wall func() time.Time // the clock calendar periods are found around when Redis's decides; nil: time.Now

	waitReplicas int           // WithWaitReplicas; 0: off
	waitTimeout  time.Duration // WithWaitReplicas
	waits        atomic.Int64  // admitting takes that waited for replicas
	waitsShort   atomic.Int64  // ... and got fewer acknowledgements than asked
}

var (
	_ driver.SharedProfile = (*Store)(nil)
	_ driver.Replies       = (*Store)(nil)
)

// ErrUnsafeEviction is wrapped by the error [Store.Check] returns when a
// Redis server's maxmemory-policy lets it evict live limiter keys.
//
// An evicted key is a forgotten window: the key's next request is
// admitted as if it had made none, and an attacker can force evictions
// with a flood of random keys. Every policy but noeviction can evict
// limiter keys: the allkeys-* policies pick among all keys, and the
// volatile-* policies among the keys with a time to live, which every
// limiter key has (it expires just after its longest window), so
// volatile-* protects only the app's keys without one. volatile-ttl
// evicts the keys nearest to expiry first: limiter keys idle for almost
// their longest window, whose entries still count until then.
//
// Safe settings: maxmemory-policy noeviction, where a full Redis refuses
// writes, the store call fails and the failure policy decides (reported
// to the observers); or a Redis of the limiter's own with memory sized
// for its keys and no maxmemory.
var ErrUnsafeEviction = redislib.ErrUnsafeEviction

// Option configures a [Store].
type Option func(*options)

type options struct {
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
func WithBatching(max int) Option {
	return func(o *options) { o.batch = max }
}

// WithPrefix sets the prefix of every key; "ratekit" by default.
func WithPrefix(prefix string) Option {
	return func(o *options) { o.prefix = prefix }
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
// units are admitted once more (see docs on failover). Waiting closes
// that window for every decision whose write reached replicas replicas in
// time; it does not close it for the decisions in flight when the master
// dies, nor for those that timed out: such a decision is still returned
// as the store decided it (the write happened on the master), and is
// counted by [Store.ReplicaWaits]. It costs every admission a replication
// round trip, so timeout must stay well below the Limiter's
// core.WithTimeout, or a slow replica turns admissions into fallbacks.
//
// It works with a *redis.Client (standalone or Sentinel failover) and a
// *redis.ClusterClient; [New] panics with other clients, with replicas <
// 0, and with replicas > 0 and timeout < 1 ms (WAIT 0 would wait
// forever). replicas 0 turns it off.
func WithWaitReplicas(replicas int, timeout time.Duration) Option {
	return func(o *options) {
		o.waitReplicas = replicas
		o.waitTimeout = timeout
	}
}

// ReplicaWaits reports, for a store built [WithWaitReplicas], how many
// admitting Takes waited for replicas, and how many of them were
// acknowledged by fewer replicas than asked (WAIT timed out, failed, or
// the decision was redirected during a cluster slot migration). The
// writes of the short ones may be lost by a failover.
func (s *Store) ReplicaWaits() (waits, short int64) {
	return s.waits.Load(), s.waitsShort.Load()
}

// New returns a store on client: a *redis.Client, a Sentinel failover
// client or a *redis.ClusterClient. It panics if client is nil, or on an
// invalid option: programmer errors caught at start-up.
func New(client redis.UniversalClient, opts ...Option) *Store {
	if client == nil {
		panic("ratekit: redisstore.New: nil client")
	}
	o := options{prefix: redislib.DefaultPrefix, batch: defaultBatch}
	for _, opt := range opts {
		opt(&o)
	}
	if o.batch < 1 || o.batch > 1000 {
		panic(fmt.Sprintf("ratekit: redisstore.New: WithBatching(%d): must be within 1..1000", o.batch))
	}
	if o.waitReplicas < 0 {
		panic(fmt.Sprintf("ratekit: redisstore.New: WithWaitReplicas replicas is %d, must be >= 0", o.waitReplicas))
	}
	s := &Store{client: client, prefix: o.prefix, waitReplicas: o.waitReplicas, waitTimeout: o.waitTimeout}
	if s.waitReplicas > 0 {
		if s.waitTimeout < time.Millisecond {
			panic(fmt.Sprintf("ratekit: redisstore.New: WithWaitReplicas timeout is %v, must be at least 1ms", s.waitTimeout))
		}
		switch client.(type) {
		case *redis.Client, *redis.ClusterClient:
		default:
			panic(fmt.Sprintf("ratekit: redisstore.New: WithWaitReplicas needs a *redis.Client or *redis.ClusterClient, not %T", client))
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
	newBatcher := func() *redislib.Batcher { return redislib.NewBatcher(s.flight, o.batch, s.honorsCtx) }
	if cc, ok := client.(*redis.ClusterClient); ok {
		s.nodes = redislib.NewNodes(func(ctx context.Context) ([]redislib.SlotRange, error) { return clusterSlots(ctx, cc) }, newBatcher)
		// go-redis does not reload its map after a failed script call
		// (they are NoRetry) before its periodic reload, a minute apart
		// by default: the store has it reload when a node fails. Its
		// ForEachMaster reloads the map before it returns (ReloadState
		// only starts a reload).
		s.nodes.Reload = func(ctx context.Context) {
			_ = cc.ForEachMaster(ctx, func(context.Context, *redis.Client) error { return nil })
		}
	} else {
		s.batch = newBatcher()
		s.inlineOK, s.readTimeout = inlineOK(client)
		if s.inlineOK {
			s.batch.SetInline(s.inline)
		}
	}
	s.replies.track(client)
	s.leases = &redislib.Leases{Name: "redisstore", Prefix: s.prefix, Cluster: s.cluster, Run: s.run, Flight: s.flight}
	s.watch = newWatcher(s)
	return s
}

// Key returns the Redis key that a limiter's decisions on key under
// policy use with SlidingLog: <prefix>:<policy>:{<key>}, the key hashed
// first when it is over 128 bytes (driver.BoundKey). Under SlidingBuckets
// the Redis key has ":b" appended. A policy with a lockout
// (Policy.Lockout) or calendar rules (Rule.Calendar) keeps all of a key's
// state, window, lockout and period counts, in one hash under ":m"
// appended, so a decision touches one key; the leases of an InFlight
// policy are under ":lease". All of a key's names share one hash slot.
func (s *Store) Key(policy, key string) string {
	return redislib.Key(s.prefix, policy, driver.BoundKey(key))
}

// wallNow returns this process's clock in µs.
func (s *Store) wallNow() int64 {
	if s.wall != nil {
		return s.wall().UnixMicro()
	}
	return time.Now().UnixMicro()
}

// Take implements [driver.Store].
func (s *Store) Take(ctx context.Context, q driver.Query) (driver.Result, error) {
	return s.decide(ctx, &q, redislib.OpTake, 0)
}

// Peek implements [driver.Store].
func (s *Store) Peek(ctx context.Context, q driver.Query) (driver.Result, error) {
	return s.decide(ctx, &q, redislib.OpPeek, 0)
}

// Refund implements [driver.Store].
func (s *Store) Refund(ctx context.Context, q driver.Query, at int64) error {
	_, err := s.decide(ctx, &q, redislib.OpRefund, at)
	return err
}

// Answered implements [driver.Replies]: whether Redis has sent bytes on a
// connection the client dialled since the store was made, since t: read
// since, or waiting unread in its socket (on Linux; elsewhere it cannot
// tell).
func (s *Store) Answered(since time.Time) (answered, known bool) { return s.replies.since(since) }

// Record implements [driver.Recorder]: the units are entries (or bucket
// and period counts) of the key, in order, as the decision's own.
func (s *Store) Record(ctx context.Context, q driver.Query, ago time.Duration) (int64, error) {
	res, err := s.decide(ctx, &q, redislib.OpRecord, ago.Microseconds())
	return res.At, err
}

// Pass implements [driver.Challenges]: the pass is a field of the key's
// one hash, read by its decisions in the same script call, and deleted
// with the key by Reset; every instance hears of it, for its fallback.
func (s *Store) Pass(ctx context.Context, q driver.Query) error {
	if _, err := s.decide(ctx, &q, redislib.OpPass, 0); err != nil {
		return err
	}
	// Every instance's fallback honours the pass too.
	msg := redislib.Key(s.prefix, q.Policy, q.Key) + redislib.PassSuffix
	_, err := redislib.Bounded(ctx, func(ctx context.Context) (int64, error) {
		return s.client.Publish(ctx, s.watch.channel, msg).Result()
	})
	if err != nil {
		return fmt.Errorf("redisstore: pass: tell the other instances: %w", err)
	}
	return nil
}

// decide runs one operation of q, waiting for its answer until ctx ends.
func (s *Store) decide(ctx context.Context, q *driver.Query, op byte, at int64) (driver.Result, error) {
	if err := ctx.Err(); err != nil {
		return driver.Result{}, fmt.Errorf("redisstore: %w", err)
	}
	c := redislib.Get()
	if err := c.Decision(s.prefix, q, op, at, s.wallNow(), s.cluster, s.watch.fleet.Of(q.Policy)); err != nil {
		redislib.Put(c)
		return driver.Result{}, fmt.Errorf("redisstore: %w", err)
	}
	if err := s.run(ctx, c); err != nil {
		// The caller gave up; the flight still owns c.
		return driver.Result{}, fmt.Errorf("redisstore: %w", s.replies.explain(err))
	}
	res, err := driver.Result{Allowed: c.Allowed, At: c.When, Rules: c.Rules, LockedFor: c.LockedFor, Challenged: c.Challenged,
		Extra: c.Extra, Exempt: c.Exempt}, c.Err
	redislib.Put(c)
	if errors.Is(err, redis.ErrClosed) {
		return driver.Result{}, fmt.Errorf("redisstore: %w: %w", driver.ErrClosed, err)
	}
	if err != nil {
		return driver.Result{}, fmt.Errorf("redisstore: %w", err)
	}
	return res, nil
}

// run sends c and waits for its answer: in a flight of the batcher, or,
// for a take that waits for replicas, on a connection of its own.
func (s *Store) run(ctx context.Context, c *redislib.Call) error {
	if c.Op == redislib.OpTake && s.waitReplicas > 0 {
		s.runAndWait(ctx, c)
		return nil
	}
	if s.nodes != nil {
		return s.nodes.Do(ctx, c)
	}
	return s.batch.Do(ctx, c)
}

// clusterSlots loads the slot map of the Cluster cc talks to: CLUSTER
// SLOTS, or the client's own ClusterOptions.ClusterSlots where it has one
// (a topology it is given, not asked).
func clusterSlots(ctx context.Context, cc *redis.ClusterClient) ([]redislib.SlotRange, error) {
	slots, err := redislib.Bounded(ctx, func(ctx context.Context) ([]redis.ClusterSlot, error) {
		if given := cc.Options().ClusterSlots; given != nil {
			return given(ctx)
		}
		// CLUSTER SLOTS rather than SHARDS: Redis 6 has no SHARDS, and
		// go-redis's own map comes from SLOTS too.
		return cc.ClusterSlots(ctx).Result() //nolint:staticcheck // see above
	})
	if err != nil {
		return nil, fmt.Errorf("CLUSTER SLOTS: %w", err)
	}
	ranges := make([]redislib.SlotRange, 0, len(slots))
	for _, r := range slots {
		if len(r.Nodes) == 0 {
			continue
		}
		ranges = append(ranges, redislib.SlotRange{Start: r.Start, End: r.End, Addr: r.Nodes[0].Addr})
	}
	return ranges, nil
}

// Reset implements [driver.Store]: it deletes every key of q.Key under
// q.Policy, then every instance forgets its cached denials of the key and
// what its fallback keeps of it (two messages: the plain one, which
// v0.1.0 understands, and the reset's own).
func (s *Store) Reset(ctx context.Context, q driver.Query) error {
	keys := redislib.AllKeys(s.prefix, q.Policy, q.Key)
	_, err := redislib.Bounded(ctx, func(ctx context.Context) (struct{}, error) {
		_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Del(ctx, keys...)
			p.Publish(ctx, s.watch.channel, keys[0])
			p.Publish(ctx, s.watch.channel, keys[0]+redislib.ResetSuffix)
			return nil
		})
		return struct{}{}, err
	})
	if err != nil {
		return fmt.Errorf("redisstore: reset: %w", err)
	}
	return nil
}

// noRetry is a script call that go-redis must not retry: a retry after a
// lost reply would run the decisions twice.
type noRetry struct{ *redis.StringCmd }

func (noRetry) NoRetry() bool { return true }

// batchCmd is one script call of a flight and the calls it decides.
type batchCmd struct {
	cmd      noRetry
	calls    []*redislib.Call
	script   bool // sent as a script even where the server has functions
	eval     bool // a script sent with its source (EVAL), not its hash
	scripted bool // cmd is a script call (EVALSHA, EVAL), not FCALL
	again    bool // Redis refused cmd without running it: send it again
	split    bool // cmd met TRYAGAIN: its calls were sent again one per command
}

// scratch is the memory of a flight, reused from one to the next.
type scratch struct {
	groups [][]*redislib.Call
	cmds   []batchCmd
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// flight sends the calls of one batch in one round trip, one script call
// per group, and writes every call's answer (or error).
func (s *Store) flight(ctx context.Context, calls []*redislib.Call) {
	sc := scratchPool.Get().(*scratch)
	sc.groups = redislib.Group(calls, s.cluster, sc.groups)
	cmds := sc.cmds[:0]
	for _, g := range sc.groups {
		b := batchCmd{calls: g}
		b.cmd, b.scripted = s.command(ctx, g, false, false)
		cmds = append(cmds, b)
	}
	cmds, _ = s.exec(ctx, cmds, s.client) // each command carries its own error
	for _, c := range calls {
		c.Replied()
	}
	for i := range cmds {
		if !cmds[i].split {
			answer(&cmds[i])
		}
	}
	s.checkSlots(cmds)
	clear(cmds)
	clear(sc.groups)
	sc.cmds = cmds[:0]
	scratchPool.Put(sc)
}

// answer decodes the reply of a script call into its calls.
func answer(b *batchCmd) {
	reply, err := b.cmd.Result()
	redislib.Decode(b.calls, reply, err)
}

// exec runs cmds on c: one command as it is, several in a pipeline (see
// send). A command that met NOSCRIPT (a restarted or flushed Redis, a
// replica just promoted) is sent again with the script's source, which
// loads it; one that Redis refused before running it is sent again after
// a pause; one that a Cluster's node redirected (MOVED, ASK) is sent again
// at once through the cluster client, which follows the redirect; one of
// several keys that a Cluster refused with TRYAGAIN (its slot migrating,
// the keys split between two nodes) is split, and its calls are sent
// again at once, one per command (appended to cmds, the split one
// marked); all while ctx allows, a few times at most, and alone: a
// command that ran, or may have, is never sent twice. It returns cmds
// with the commands of the split ones. A client that ignores ctx may
// hold exec past ctx's deadline; the callers are not held, they wait on
// their own contexts.
func (s *Store) exec(ctx context.Context, cmds []batchCmd, c processor) ([]batchCmd, error) {
	_, follows := c.(*redis.ClusterClient)
	for attempt := 0; ; attempt++ {
		err := send(ctx, cmds, attempt > 0, c)
		if err == nil || attempt >= 4 || ctx.Err() != nil {
			return cmds, err
		}
		var again, pause, load bool
		cmds, again, pause, load = s.retry(ctx, cmds, follows)
		if load && s.loadLibrary(ctx, c) != nil {
			// The server refuses FUNCTION LOAD (an ACL, a managed
			// service): scripts from now on.
			s.scripts.Store(true)
		}
		if !again {
			return cmds, err
		}
		if pause {
			d := time.Duration(1<<attempt) * 5 * time.Millisecond
			if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
				return cmds, err
			}
			time.Sleep(d)
		}
		// Only commands sent again are rebuilt: the others keep their
		// answer or error.
		for i := range cmds {
			if b := &cmds[i]; b.again {
				b.cmd, b.scripted = s.command(ctx, b.calls, b.script, b.eval)
			}
		}
	}
}

// checkSlots reports to the slot map a failing connection (the map and
// go-redis's are loaded again at once: a master may have died), or a
// command that met a redirect it did not follow (the map is stale).
func (s *Store) checkSlots(cmds []batchCmd) {
	if s.nodes == nil {
		return
	}
	stale := false
	for i := range cmds {
		err := cmds[i].cmd.Err()
		switch {
		case err == nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		case !isRedisError(err):
			if redislib.ConnFailure(err) {
				s.nodes.Failed()
				return
			}
			stale = true
		case redislib.Moved(err.Error()):
			stale = true
		}
	}
	if stale {
		s.nodes.Stale()
	}
}

// send sends cmds on c, or with again only those marked to be sent again:
// one as it is, several in a pipeline; on a Cluster, several in one
// pipeline per master (sendNodes) the first time, and each on its own
// (sendAlone) when sent again.
func send(ctx context.Context, cmds []batchCmd, again bool, c processor) error {
	var one *batchCmd
	n := 0
	for i := range cmds {
		if !again || cmds[i].again {
			one = &cmds[i]
			n++
		}
	}
	if n == 1 {
		return c.Process(ctx, one.cmd)
	}
	if cc, ok := c.(*redis.ClusterClient); ok {
		if again {
			return sendAlone(ctx, cmds, cc)
		}
		return sendNodes(ctx, cmds, cc)
	}
	p := c.Pipeline()
	for i := range cmds {
		if !again || cmds[i].again {
			_ = p.Process(ctx, cmds[i].cmd)
		}
	}
	_, err := p.Exec(ctx)
	return err
}

// sendNodes sends cmds on a Cluster in a pipeline to the client of the
// master that serves their slots, as go-redis's map says (one pipeline
// per master: a flight's calls are of one master unless the maps
// disagree). A command the master redirects (MOVED, ASK) comes back with
// the redirect, which exec then follows through the cluster client at
// once: a pipeline of the cluster client follows redirects only after a
// pause of at least ClusterOptions.MinRetryBackoff (8 ms by default,
// often more than a Limiter's whole timeout), so that every decision of a
// flight that met a migrating slot would time out.
func sendNodes(ctx context.Context, cmds []batchCmd, cc *redis.ClusterClient) error {
	type pipe struct {
		node *redis.Client
		p    redis.Pipeliner
	}
	var (
		one   [1]pipe
		pipes = one[:0]
	)
	for i := range cmds {
		b := &cmds[i]
		node, err := cc.MasterForKey(ctx, b.calls[0].Key)
		if err != nil {
			b.cmd.SetErr(err)
			continue
		}
		j := 0
		for j < len(pipes) && pipes[j].node != node {
			j++
		}
		if j == len(pipes) {
			pipes = append(pipes, pipe{node, node.Pipeline()})
		}
		_ = pipes[j].p.Process(ctx, b.cmd)
	}
	var wg sync.WaitGroup
	for _, p := range pipes[min(1, len(pipes)):] {
		wg.Go(func() { _, _ = p.p.Exec(ctx) })
	}
	if len(pipes) > 0 {
		_, _ = pipes[0].p.Exec(ctx)
	}
	wg.Wait()
	for i := range cmds {
		if err := cmds[i].cmd.Err(); err != nil {
			return err
		}
	}
	return nil
}

// maxAlone bounds the commands sendAlone sends at once.
const maxAlone = 8

// sendAlone sends each command of cmds marked to be sent again through
// the cluster client on its own, up to maxAlone at once, so that each
// follows its own redirect at once (see sendNodes): the calls of a split
// command, or commands a node redirected.
func sendAlone(ctx context.Context, cmds []batchCmd, cc *redis.ClusterClient) error {
	var todo []*batchCmd
	for i := range cmds {
		if cmds[i].again {
			todo = append(todo, &cmds[i])
		}
	}
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	work := func() {
		for i := next.Add(1) - 1; i < int64(len(todo)); i = next.Add(1) - 1 {
			_ = cc.Process(ctx, todo[i].cmd)
		}
	}
	for range min(len(todo), maxAlone) - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()
	for _, b := range todo {
		if err := b.cmd.Err(); err != nil {
			return err
		}
	}
	return nil
}

// retry reads the errors of cmds and marks those Redis refused without
// running them to be sent again (see redislib.RetryOf): whether any is
// (again), after a pause (pause), and after loading the library (load).
// A command of several calls refused with TRYAGAIN is marked split, and
// a command per call is appended to cmds, to be sent at once; a
// redirected one is sent again when follows says that the client follows
// redirects. It returns cmds.
func (s *Store) retry(ctx context.Context, cmds []batchCmd, follows bool) (_ []batchCmd, again, pause, load bool) {
	for i, n := 0, len(cmds); i < n; i++ {
		b := &cmds[i]
		b.again = false
		if b.split {
			continue // its calls went on in commands of their own
		}
		e := b.cmd.Err()
		if e == nil || !isRedisError(e) && !errors.Is(e, redis.ErrNoScript) {
			continue
		}
		r := redislib.RetryOf(e.Error(), b.scripted, len(b.calls))
		if errors.Is(e, redis.ErrNoScript) {
			r = redislib.RetryEval
		}
		switch r {
		case redislib.RetryNone:
			continue
		case redislib.RetryRedirect:
			if !follows {
				continue
			}
		case redislib.RetrySplit:
			cmds = split(ctx, cmds, i, e)
			again = true
			continue
		case redislib.RetryLoad:
			load = true
		case redislib.RetryPause:
			pause = true
		default:
			s.mend(b, r)
		}
		b.again = true
		again = true
	}
	return cmds, again, pause, load
}

// split marks cmds[i], a command of several calls that Redis refused with
// e, as split, and appends a command of its own for each of its calls,
// which carries the refusal until it is sent.
func split(ctx context.Context, cmds []batchCmd, i int, e error) []batchCmd {
	b := &cmds[i]
	b.split = true
	script, eval, calls := b.script, b.eval, b.calls // b may move as cmds grows
	for _, c := range calls {
		c.One[0] = c
		one := batchCmd{cmd: noRetry{redis.NewStringCmd(ctx)}, calls: c.One[:], script: script, eval: eval, again: true}
		one.cmd.SetErr(e)
		cmds = append(cmds, one)
	}
	return cmds
}

// mend changes how b is sent again after a refusal of kind r: by EVAL, by
// its script rather than the function library, or every call by script.
func (s *Store) mend(b *batchCmd, r redislib.Retry) {
	switch r {
	case redislib.RetryEval:
		b.eval = true
	case redislib.RetryScript:
		b.script = true
	case redislib.RetryScripts:
		s.scripts.Store(true)
	}
}

// isRedisError reports an error answered by the server, not one of the
// connection.
func isRedisError(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

// loadLibrary loads the library into the server c talks to, or into
// every master of a cluster.
func (s *Store) loadLibrary(ctx context.Context, c processor) error {
	load := func(ctx context.Context, c redis.Cmdable) error {
		err := c.FunctionLoad(ctx, redislib.LibCode).Err()
		switch {
		case err != nil && strings.Contains(err.Error(), "already exists"):
			return nil // loaded meanwhile
		case err == nil:
			s.pruned() // the first of its release here: earlier ones may have gone
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

// command builds the call deciding calls, all of one kind: FCALL of the
// library's function, or where the server has none (or for leases)
// EVALSHA of the script, or EVAL with its source when eval is set; and
// says whether it is a script call.
func (s *Store) command(ctx context.Context, calls []*redislib.Call, script, eval bool) (cmd noRetry, scripted bool) {
	fn, sc := redislib.Function(calls[0].Kind)
	// The first call's buffers carry the command: go-redis is done with
	// them when the flight is, and a call whose caller gave up stays
	// with its flight, out of the pool.
	lead := calls[0]
	args := lead.Args[:0]
	switch {
	case fn != "" && !script && !s.scripts.Load():
		args = append(args, "fcall", fn)
	case eval:
		args, scripted = append(args, "eval", sc.Source), true
	default:
		args, scripted = append(args, "evalsha", sc.SHA), true
	}
	args = append(args, len(calls))
	for _, c := range calls {
		args = append(args, c.Key)
	}
	args = append(args, redislib.Encode(calls))
	if redislib.Publishes(calls) {
		args = append(args, s.watch.channel)
	}
	lead.Args = args
	return noRetry{redis.NewStringCmd(ctx, args...)}, scripted
}

// runAndWait runs a take alone on one connection of the key's master and,
// when it admitted units, WAIT on that same connection
// ([WithWaitReplicas]).
func (s *Store) runAndWait(ctx context.Context, c *redislib.Call) {
	// The work runs on a copy of c: a client that ignores ctx may still
	// be writing the copy's answer after Bounded has returned.
	w := c.Copy()
	done, _ := redislib.Bounded(ctx, func(ctx context.Context) (*redislib.Call, error) {
		s.takeAndWait(ctx, w)
		return w, nil
	})
	if done == nil {
		c.Err = ctx.Err()
		return
	}
	c.Allowed, c.Challenged, c.When, c.Rules, c.LockedFor, c.Used, c.Err = done.Allowed, done.Challenged, done.When, done.Rules, done.LockedFor, done.Used, done.Err
}

// takeAndWait is runAndWait's work, on a call of its own.
func (s *Store) takeAndWait(ctx context.Context, c *redislib.Call) {
	var node *redis.Client
	switch cl := s.client.(type) {
	case *redis.ClusterClient:
		n, err := cl.MasterForKey(ctx, c.Key)
		if err != nil {
			c.Err = err
			return
		}
		node = n
	case *redis.Client:
		node = cl
	}
	conn := node.Conn()
	defer conn.Close()
	c.One[0] = c
	cmds := []batchCmd{{calls: c.One[:]}}
	cmds[0].cmd, cmds[0].scripted = s.command(ctx, c.One[:], false, false)
	cmds, err := s.exec(ctx, cmds, conn)
	_, moved := redis.IsMovedError(err)
	_, ask := redis.IsAskError(err)
	if moved || ask {
		// The key's slot moved or is moving: the cluster client follows
		// the redirect; this decision does not wait.
		cmds[0].cmd, cmds[0].scripted = s.command(ctx, cmds[0].calls, cmds[0].script, cmds[0].eval)
		cmds, _ = s.exec(ctx, cmds, s.client)
		answer(&cmds[0])
		if c.Err == nil && c.Allowed {
			s.waits.Add(1)
			s.waitsShort.Add(1)
		}
		return
	}
	answer(&cmds[0])
	if c.Err != nil || !c.Allowed {
		return
	}
	s.waits.Add(1)
	acked, err := conn.Wait(ctx, s.waitReplicas, s.waitTimeout).Result()
	if err != nil || acked < int64(s.waitReplicas) {
		s.waitsShort.Add(1)
	}
}
