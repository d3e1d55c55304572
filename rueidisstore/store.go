package rueidisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/internal/redislib"
)

// defaultBatch is the most decisions one script call carries unless
// WithBatching sets another.
const defaultBatch = 64

// Store is a [driver.Store] on Redis through rueidis, shared by every app
// instance that uses the same Redis. It keeps what the go-redis driver
// (redisstore) keeps, under the same names and in the same layout, and
// decides with the same Lua library: instances on either driver share one
// Redis and one prefix, and count together. Each decision is made
// atomically on the one Redis key of its (policy, key), named
// <prefix>:<policy>:{<key>}; the braces are a Redis Cluster hash tag, so
// a decision touches one slot. Under SlidingLog the key is a string of the
// newest admission times, 8 bytes each; under SlidingBuckets it is a hash
// of bucket counts (":b" appended to the name).
//
// Time comes from the Redis server (TIME, in microseconds), so clock skew
// between app nodes cannot move the windows.
//
// Decisions made while others are in flight share script calls: one call
// decides a batch of them (one per Cluster slot), so a busy store spends a
// round trip and a script call per batch rather than per decision (see
// [WithBatching]); rueidis pipelines the flights of concurrent batches on
// its shared connections.
//
// The script calls are never retried blindly: rueidis sends a command
// again after a network error only when it is read-only, and FCALL,
// EVALSHA and EVAL are not, so a call whose reply is lost is a store
// failure, which the [core.Limiter]'s failure policy resolves, and its
// units are counted once. Calls that Redis refused before running them (a
// script not in its cache, a function not loaded, a replica read-only
// after a failover, a cluster that is down or loading; rueidis follows
// MOVED and ASK itself) are sent again, alone, while the caller's
// deadline allows.
//
// A caller waits for its answer on its own context, while the decision's
// reply is read by a goroutine of the store, whose I/O is bounded by the
// latest deadline of the callers it carries: so a paused Redis costs a
// request no more than the Limiter's timeout, and a reply that came while
// the process was too busy to read it is not lost (see core.WithTimeout).
//
// On a Redis Cluster, as redisstore does, the store keeps the Cluster's
// slot map (CLUSTER SLOTS) and batches each master's decisions apart, so
// that a master that stops answering holds up its own keys' decisions
// only, and [Store.Partition] names the master; a script call of several
// keys that Redis refuses with TRYAGAIN (their slot migrating) is sent
// again at once one key per call. A connection to a node that fails
// (refused, reset) makes the store load the slot map at once and every
// 200 ms while such failures go on, so that its partitions follow the
// replica the Cluster promotes in place of a master that died; rueidis
// reloads its own map on such errors.
//
// A Store offers every optional capability of the core package: leases
// ([driver.Leases]), challenges ([driver.Challenges]), invalidations
// between instances over pub/sub ([driver.Invalidator]), the count of
// instances ([driver.Fleet]), breakers per Cluster master
// ([driver.Partitioned]), a check of the server ([driver.Checker]) and the
// keys refused most, summed over the instances ([driver.Refusals]).
// Unlike redisstore it cannot wait for replicas
// (redisstore.WithWaitReplicas). It is safe for concurrent use. It does
// not close the client: the caller owns it. The store's goroutines (the
// subscription, and the fleet's announcements) end with [Store.Close], or
// when rueidis reports the client closed.
//
// An app calls [Store.Check], [Store.Close] and [Store.Key]; the other
// methods implement the driver contract (package core/driver) for the
// limiters: Take, Peek, Refund, Reset and the rest are not meant for an
// app.
type Store struct {
	leases  *redislib.Leases // driver.Leases, made once
	client  rueidis.Client
	cluster bool // slot by slot
	prefix  string
	batch   *redislib.Batcher // on a single node
	nodes   *redislib.Nodes   // on a Cluster: a batcher per master
	scripts atomic.Bool       // the server has no FCALL: run the library as scripts
	prune   sync.Once         // the libraries no instance runs are deleted (pruned)

	// Invalidations between instances, and the fleet (watch.go).
	channel  string
	watchers *redislib.Watchers
	fleet    *redislib.Fleet
	listen   sync.Once // starts the subscription
	beat     sync.Once // starts the fleet's announcements

	// The lifetime of the store's goroutines (Close).
	life    context.Context
	stop    context.CancelFunc
	mu      sync.Mutex // orders start and Close
	closed  bool
	running sync.WaitGroup

	wall func() time.Time // the clock calendar periods are found around when Redis's decides; nil: time.Now
}

var _ driver.SharedProfile = (*Store)(nil)

// ErrUnsafeEviction is wrapped by the error [Store.Check] returns when a
// Redis server's maxmemory-policy lets it evict live limiter keys: an
// evicted key is a forgotten window. It is redisstore.ErrUnsafeEviction,
// which explains the safe settings.
var ErrUnsafeEviction = redislib.ErrUnsafeEviction

// Option configures a [Store].
type Option func(*options)

type options struct {
	prefix string
	batch  int
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

// WithPrefix sets the prefix of every key; "ratekit" by default. Stores
// of both drivers with one prefix on one Redis share their windows.
func WithPrefix(prefix string) Option {
	return func(o *options) { o.prefix = prefix }
}

// New returns a store on client: a rueidis client of a standalone Redis, a
// Sentinel master set or a Redis Cluster (client.Mode tells which). It
// panics if client is nil, or on an invalid option: programmer errors
// caught at start-up.
func New(client rueidis.Client, opts ...Option) *Store {
	if client == nil {
		panic("ratekit: rueidisstore.New: nil client")
	}
	o := options{prefix: redislib.DefaultPrefix, batch: defaultBatch}
	for _, opt := range opts {
		opt(&o)
	}
	if o.batch < 1 || o.batch > 1000 {
		panic(fmt.Sprintf("ratekit: rueidisstore.New: WithBatching(%d): must be within 1..1000", o.batch))
	}
	s := &Store{client: raceSafe(client), cluster: client.Mode() == rueidis.ClientModeCluster, prefix: o.prefix,
		channel: redislib.Channel(o.prefix), watchers: redislib.NewWatchers(o.prefix), fleet: redislib.NewFleet()}
	s.life, s.stop = context.WithCancel(context.Background())
	// rueidis bounds its I/O by the context: a flight's carries the
	// latest deadline of its callers.
	newBatcher := func() *redislib.Batcher { return redislib.NewBatcher(s.flight, o.batch, true) }
	if s.cluster {
		s.nodes = redislib.NewNodes(s.clusterSlots, newBatcher)
	} else {
		s.batch = newBatcher()
	}
	s.leases = &redislib.Leases{Name: "rueidisstore", Prefix: s.prefix, Cluster: s.cluster, Run: s.do, Flight: s.flight}
	return s
}

// do sends c through the batcher of its master (on a Cluster) or the
// store's, and waits for its answer (see redislib.Batcher.Do).
func (s *Store) do(ctx context.Context, c *redislib.Call) error {
	if s.nodes != nil {
		return s.nodes.Do(ctx, c)
	}
	return s.batch.Do(ctx, c)
}

// Close ends the store's goroutines: the subscription that carries
// invalidations to the limiters watching the store ([Store.Watch]) and
// the announcements of this instance ([Store.Join]), and withdraws this
// instance's announcements, so that the instances that share a policy
// count one fewer at once; it returns when they have ended, within a
// second (announcements it could not withdraw then count until they
// expire, six seconds after the last). It does not close the client. Close a store that an app drops
// while it goes on (a configuration reload): otherwise it is counted
// among the policy's instances for as long as the process runs. The
// goroutines also end by themselves once rueidis answers rueidis.ErrClosing, which it does after
// the client is closed, but not always: a client closed after a failed
// dial answers that dial's error instead, so close the store before its
// client. Decisions still work after Close, but no watcher hears
// invalidations any more and the fleet is no longer announced.
func (s *Store) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	ps := s.fleet.Leave()
	s.stop()
	done := make(chan struct{})
	go func() {
		s.running.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		return
	}
	if len(ps) == 0 {
		return
	}
	b := s.client.B()
	cmds := make(rueidis.Commands, 0, len(ps))
	for _, p := range ps {
		cmds = append(cmds, b.Zrem().Key(redislib.FleetKey(s.prefix, p.Name)).Member(p.Member).Build())
	}
	s.client.DoMulti(ctx, cmds...) // at worst, they count until they expire
}

// closeTimeout bounds Close.
const closeTimeout = time.Second

// start runs f on a goroutine of the store's, unless it is closed (see
// Close).
func (s *Store) start(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.running.Add(1)
	go func() {
		defer s.running.Done()
		f()
	}()
}

// Key returns the Redis key that a limiter's decisions on key under
// policy use with SlidingLog: <prefix>:<policy>:{<key>}, the key hashed
// first when it is over 128 bytes (driver.BoundKey). Under SlidingBuckets
// the Redis key has ":b" appended. A policy with a lockout
// (Policy.Lockout) or calendar rules (Rule.Calendar) keeps all of a key's
// state, window, lockout and period counts, in one hash under ":m"
// appended, so a decision touches one key; the leases of an InFlight
// policy are under ":lease". All of a key's names share one hash slot. The
// names are redisstore's.
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

// Record implements [driver.Recorder]: the units are entries (or bucket
// and period counts) of the key, in order, as the decision's own.
func (s *Store) Record(ctx context.Context, q driver.Query, ago time.Duration) (int64, error) {
	res, err := s.decide(ctx, &q, redislib.OpRecord, ago.Microseconds())
	return res.At, err
}

// Pass implements [driver.Challenges]: the pass is a field of the key's
// one hash, read by its decisions in the same script call, and deleted
// with the key by Reset.
func (s *Store) Pass(ctx context.Context, q driver.Query) error {
	if _, err := s.decide(ctx, &q, redislib.OpPass, 0); err != nil {
		return err
	}
	// Every instance's fallback honours the pass too.
	msg := redislib.Key(s.prefix, q.Policy, q.Key) + redislib.PassSuffix
	_, err := redislib.Bounded(ctx, func(ctx context.Context) (int64, error) {
		return s.client.Do(ctx, s.client.B().Publish().Channel(s.channel).Message(msg).Build()).AsInt64()
	})
	if err != nil {
		return fmt.Errorf("rueidisstore: pass: tell the other instances: %w", err)
	}
	return nil
}

// decide runs one operation of q, waiting for its answer until ctx ends.
func (s *Store) decide(ctx context.Context, q *driver.Query, op byte, at int64) (driver.Result, error) {
	if err := ctx.Err(); err != nil {
		return driver.Result{}, fmt.Errorf("rueidisstore: %w", err)
	}
	c := redislib.Get()
	if err := c.Decision(s.prefix, q, op, at, s.wallNow(), s.cluster, s.fleet.Of(q.Policy)); err != nil {
		redislib.Put(c)
		return driver.Result{}, fmt.Errorf("rueidisstore: %w", err)
	}
	if err := s.do(ctx, c); err != nil {
		// The caller gave up; the flight still owns c.
		return driver.Result{}, fmt.Errorf("rueidisstore: %w", err)
	}
	res, err := driver.Result{Allowed: c.Allowed, At: c.When, Rules: c.Rules, LockedFor: c.LockedFor, Challenged: c.Challenged,
		Extra: c.Extra, Exempt: c.Exempt}, c.Err
	redislib.Put(c)
	if errors.Is(err, rueidis.ErrClosing) || err != nil && s.isClosed() {
		// A client closed after a failed dial answers that dial's error
		// (rueidis dials again on every call), not ErrClosing: a call
		// that fails once the store was closed is taken for the client's
		// end too, so that the limiters stop retrying what they keep.
		return driver.Result{}, fmt.Errorf("rueidisstore: %w: %w", driver.ErrClosed, err)
	}
	if err != nil {
		return driver.Result{}, fmt.Errorf("rueidisstore: %w", err)
	}
	return res, nil
}

// isClosed reports whether Close was called.
func (s *Store) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Reset implements [driver.Store]: it deletes every key of q.Key under
// q.Policy, then every instance forgets its cached denials of the key.
func (s *Store) Reset(ctx context.Context, q driver.Query) error {
	keys := redislib.AllKeys(s.prefix, q.Policy, q.Key)
	_, err := redislib.Bounded(ctx, func(ctx context.Context) (struct{}, error) {
		b := s.client.B()
		cmds := make(rueidis.Commands, 0, len(keys)+1)
		if s.sameSlot(keys) {
			cmds = append(cmds, b.Del().Key(keys...).Build())
		} else {
			// A prefix or key with an empty hash tag ("{}") spreads the
			// keys over slots: one DEL each.
			for _, k := range keys {
				cmds = append(cmds, b.Del().Key(k).Build())
			}
		}
		cmds = append(cmds, b.Publish().Channel(s.channel).Message(keys[0]).Build(),
			b.Publish().Channel(s.channel).Message(keys[0]+redislib.ResetSuffix).Build())
		for _, r := range s.client.DoMulti(ctx, cmds...) {
			if err := r.Error(); err != nil {
				return struct{}{}, err
			}
		}
		return struct{}{}, nil
	})
	if err != nil {
		return fmt.Errorf("rueidisstore: reset: %w", err)
	}
	return nil
}

// sameSlot reports whether keys share one Cluster slot, or slots do not
// matter.
func (s *Store) sameSlot(keys []string) bool {
	if !s.cluster {
		return true
	}
	for _, k := range keys[1:] {
		if redislib.Slot(k) != redislib.Slot(keys[0]) {
			return false
		}
	}
	return true
}

// batchCmd is one script call of a flight and the calls it decides.
type batchCmd struct {
	calls    []*redislib.Call
	script   bool // sent as a script even where the server has functions
	eval     bool // a script sent with its source (EVAL), not its hash
	scripted bool // sent as a script call (EVALSHA, EVAL), not FCALL
	again    bool // Redis refused it without running it: send it again
	split    bool // it met TRYAGAIN: its calls were sent again one per command

	reply string
	err   error
}

// scratch is the memory of a flight, reused from one to the next.
type scratch struct {
	groups [][]*redislib.Call
	cmds   []batchCmd
	sent   []*batchCmd
	multi  rueidis.Commands
	keys   []string
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// flight sends the calls of one batch in one round trip, one script call
// per group, and writes every call's answer (or error).
func (s *Store) flight(ctx context.Context, calls []*redislib.Call) {
	sc := scratchPool.Get().(*scratch)
	sc.groups = redislib.Group(calls, s.cluster, sc.groups)
	cmds := sc.cmds[:0]
	for _, g := range sc.groups {
		cmds = append(cmds, batchCmd{calls: g})
	}
	cmds = s.exec(ctx, cmds, sc)
	for _, c := range calls {
		c.Replied()
	}
	for i := range cmds {
		if !cmds[i].split {
			redislib.Decode(cmds[i].calls, cmds[i].reply, cmds[i].err)
		}
	}
	s.checkSlots(cmds)
	clear(cmds)
	clear(sc.groups)
	sc.cmds = cmds[:0]
	scratchPool.Put(sc)
}

// exec sends cmds: one command as it is, several in one DoMulti. A
// command that Redis refused without running it (see redislib.RetryOf) is
// sent again, alone, while ctx allows, a few times at most: a command
// that ran, or may have, is never sent twice. One of several keys that a
// Cluster refused with TRYAGAIN (its slot migrating, the keys split
// between two nodes) is split: its calls are sent again at once, one per
// command, appended to cmds, which exec returns.
func (s *Store) exec(ctx context.Context, cmds []batchCmd, sc *scratch) []batchCmd {
	for attempt := 0; ; attempt++ {
		s.send(ctx, cmds, attempt > 0, sc)
		if attempt >= 4 || ctx.Err() != nil {
			return cmds
		}
		var again, pause, load bool
		cmds, again, pause, load = s.retry(cmds)
		if load && s.loadLibrary(ctx) != nil {
			// The server refuses FUNCTION LOAD (an ACL, a managed
			// service): scripts from now on.
			s.scripts.Store(true)
		}
		if !again {
			return cmds
		}
		if pause {
			d := time.Duration(1<<attempt) * 5 * time.Millisecond
			if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
				return cmds
			}
			time.Sleep(d)
		}
	}
}

// checkSlots reports to the slot map a failing connection (the map is
// loaded again at once: a master may have died; rueidis reloads its own
// on such errors), or a command that met a redirect it did not follow
// (the map is stale).
func (s *Store) checkSlots(cmds []batchCmd) {
	if s.nodes == nil {
		return
	}
	stale := false
	for i := range cmds {
		err := cmds[i].err
		if err == nil || rueidis.IsRedisNil(err) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			continue
		}
		re, ok := rueidis.IsRedisErr(err)
		switch {
		case !ok && redislib.ConnFailure(err):
			s.nodes.Failed()
			return
		case !ok || redislib.Moved(re.Error()):
			stale = true
		}
	}
	if stale {
		s.nodes.Stale()
	}
}

// send sends cmds, or with again only those marked to be sent again, and
// keeps each one's reply or error.
func (s *Store) send(ctx context.Context, cmds []batchCmd, again bool, sc *scratch) {
	sent, multi := sc.sent[:0], sc.multi[:0]
	for i := range cmds {
		if b := &cmds[i]; !again || b.again {
			multi = append(multi, s.command(b, sc))
			sent = append(sent, b)
		}
	}
	if len(multi) == 1 {
		sent[0].result(s.client.Do(ctx, multi[0]))
	} else {
		for i, r := range s.client.DoMulti(ctx, multi...) {
			sent[i].result(r)
		}
	}
	clear(sent)
	clear(multi)
	sc.sent, sc.multi = sent[:0], multi[:0]
}

// result keeps the reply of b's command.
func (b *batchCmd) result(r rueidis.RedisResult) {
	b.reply, b.err = r.ToString()
	if r.NonRedisError() != nil {
		// rueidis may still hold the command in its queue (its context
		// ended first), and write it later: its arguments' memory is
		// not reused.
		b.calls[0].Blob.Drop()
	}
}

// retry reads the errors of cmds and marks those Redis refused without
// running them to be sent again (see redislib.RetryOf): whether any is
// (again), after a pause (pause), and after loading the library (load).
// A command of several calls refused with TRYAGAIN is marked split, and
// a command per call is appended to cmds, to be sent at once; it returns
// cmds.
func (s *Store) retry(cmds []batchCmd) (_ []batchCmd, again, pause, load bool) {
	for i, n := 0, len(cmds); i < n; i++ {
		b := &cmds[i]
		b.again = false
		if b.split {
			continue // its calls went on in commands of their own
		}
		re, ok := rueidis.IsRedisErr(b.err)
		if !ok {
			continue
		}
		switch redislib.RetryOf(re.Error(), b.scripted, len(b.calls)) {
		case redislib.RetryNone:
			continue
		case redislib.RetryRedirect:
			// rueidis ran out of redirects (MaxMovedRedirections): it
			// follows the next one.
		case redislib.RetrySplit:
			b.split = true
			script, eval, refused := b.script, b.eval, b.err
			for _, c := range b.calls { // b may move as cmds grows
				c.One[0] = c
				// Until it is sent, it carries the refusal.
				cmds = append(cmds, batchCmd{calls: c.One[:], script: script, eval: eval, again: true, err: refused})
			}
			again = true
			continue
		case redislib.RetryEval:
			b.eval = true
		case redislib.RetryLoad:
			load = true
		case redislib.RetryScript:
			b.script = true
		case redislib.RetryScripts:
			s.scripts.Store(true)
		case redislib.RetryPause:
			pause = true
		}
		b.again = true
		again = true
	}
	return cmds, again, pause, load
}

// command builds the call deciding b's calls, all of one kind: FCALL of
// the library's function, or where the server has none (or for leases)
// EVALSHA of the script, or EVAL with its source when b.eval is set.
func (s *Store) command(b *batchCmd, sc *scratch) rueidis.Completed {
	calls := b.calls
	keys := sc.keys[:0]
	for _, c := range calls {
		keys = append(keys, c.Key)
	}
	sc.keys = keys
	// The packed arguments stay in the first call's memory, which
	// rueidis reads while it writes the command.
	blob := rueidis.BinaryString(redislib.Encode(calls).Bytes())
	n := int64(len(calls))
	fn, script := redislib.Function(calls[0].Kind)
	bld := s.client.B()
	b.scripted = true
	switch {
	case fn != "" && !b.script && !s.scripts.Load():
		b.scripted = false
		cmd := bld.Fcall().Function(fn).Numkeys(n).Key(keys...).Arg(blob)
		if redislib.Publishes(calls) {
			cmd = cmd.Arg(s.channel)
		}
		return cmd.Build()
	case b.eval:
		cmd := bld.Eval().Script(script.Source).Numkeys(n).Key(keys...).Arg(blob)
		if redislib.Publishes(calls) {
			cmd = cmd.Arg(s.channel)
		}
		return cmd.Build()
	default:
		cmd := bld.Evalsha().Sha1(script.SHA).Numkeys(n).Key(keys...).Arg(blob)
		if redislib.Publishes(calls) {
			cmd = cmd.Arg(s.channel)
		}
		return cmd.Build()
	}
}

// loadLibrary loads the library into the server, or into every master of
// a Cluster.
func (s *Store) loadLibrary(ctx context.Context) error {
	nodes, err := s.masters(ctx)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if err := s.loadOn(ctx, n.client); err != nil {
			return fmt.Errorf("%s: %w", n.addr, err)
		}
	}
	return nil
}

// loadOn loads the library into the server c talks to.
func (s *Store) loadOn(ctx context.Context, c rueidis.Client) error {
	err := c.Do(ctx, c.B().FunctionLoad().FunctionCode(redislib.LibCode).Build()).Error()
	switch {
	case err != nil && strings.Contains(err.Error(), "already exists"):
		return nil // loaded meanwhile
	case err == nil:
		s.pruned() // the first of its release here: earlier ones may have gone
	}
	return err
}
