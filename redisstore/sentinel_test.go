package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/redisstore"
)

// failoverRun is what one kill-the-master scenario measured.
type failoverRun struct {
	keys          int   // keys the store admitted units for
	storeAdmitted int64 // units the store admitted, through the failover
	over          int64 // units admitted by the store beyond the limit, summed over keys
	overKeys      int   // keys admitted beyond the limit
	decisions     int64
	fallbacks     int64 // decisions by the failure policy (FailLocal)
	localAdmitted int64 // units the fallback admitted
	failover      time.Duration
	resumed       time.Duration // from the kill to the first store decision of a call made after it
	waits         int64         // RedisStore.ReplicaWaits: admissions that waited
	// Admissions acknowledged by no replica: before the kill, in flight
	// at the kill (until the failover), and after it (the promoted
	// replica has no replica of its own).
	shortBefore, shortKill, shortAfter int64
}

func (r failoverRun) String() string {
	s := fmt.Sprintf("%d decisions, %d units admitted by the store on %d keys; over the limit after the failover: %d units on %d keys; "+
		"%d decisions fell back (FailLocal, %d units admitted locally); sentinels promoted the replica %v after the kill, store decisions resumed after %v",
		r.decisions, r.storeAdmitted, r.keys, r.over, r.overKeys, r.fallbacks, r.localAdmitted,
		r.failover.Round(time.Millisecond), r.resumed.Round(time.Millisecond))
	if r.waits > 0 {
		s += fmt.Sprintf("; WAIT: %d admissions waited; not acknowledged: %d before the kill, %d in flight at the kill, %d after the failover (no replica left)",
			r.waits, r.shortBefore, r.shortKill, r.shortAfter)
	}
	return s
}

const (
	failoverLimit      = 20
	failoverGoroutines = 4
)

// runFailover starts a master, a replica and three sentinels, puts a
// limiter on a failover client under load, kills the master and keeps
// the load up until the limiter decides on the promoted replica again.
// Each goroutine asks one key after another, each until it is denied, so
// keys are being filled when the master dies. Then it asks every key the
// store had admitted units for until the new master denies it: a key
// whose last admissions the new master lacks admits them again, and
// admits more than the limit in total. That excess is the over-admission
// asynchronous replication allows at failover.
func runFailover(t *testing.T, lag time.Duration, storeOpts ...redisstore.Option) failoverRun {
	t.Helper()
	var opts []redistest.SentinelOption
	if lag > 0 {
		opts = append(opts, redistest.WithReplicationLag(lag))
	}
	start := time.Now()
	s := redistest.StartSentinel(t, opts...)
	t.Logf("master, replica and 3 sentinels up in %v", time.Since(start).Round(time.Millisecond))
	rdb := s.FailoverClient(t)
	store := redisstore.New(rdb, storeOpts...)
	policy := core.Policy{Name: "fo", Rules: []core.Rule{{Limit: failoverLimit, Window: 10 * time.Minute}}}
	var storeErrs atomic.Int64
	l := testkit.Limiter(t, store, policy, core.WithTimeout(300*time.Millisecond),
		core.WithObserver(core.ObserverFunc(func(_ context.Context, e core.Event) {
			if e.Kind == core.EventStoreError && storeErrs.Add(1) <= 3 {
				t.Logf("store error: %v", e.Err)
			}
		})))

	type keyCount struct{ store, local int64 }
	var (
		r        failoverRun
		mu       sync.Mutex
		counts   = make(map[string]*keyCount)
		errs     atomic.Int64
		killedAt atomic.Int64 // UnixNano; 0 before the kill
		resumed  atomic.Int64 // UnixNano of the first store decision after the kill
		stop     = make(chan struct{})
		wg       sync.WaitGroup
	)
	ctx := context.Background()
	for g := range failoverGoroutines {
		wg.Go(func() {
			local := make(map[string]*keyCount)
			var decisions, fallbacks int64
			defer func() {
				mu.Lock()
				for k, c := range local {
					counts[k] = c
				}
				r.decisions += decisions
				r.fallbacks += fallbacks
				mu.Unlock()
			}()
			for n := 0; ; n++ {
				key := fmt.Sprintf("g%d-%d", g, n)
				c := &keyCount{}
				local[key] = c
				for {
					select {
					case <-stop:
						return
					default:
					}
					started := time.Now().UnixNano()
					d, err := l.Allow(ctx, key)
					decisions++
					if err != nil {
						if errs.Add(1) <= 5 {
							t.Errorf("Allow(%s): %v", key, err)
						}
						continue
					}
					if d.Source.Fallback() {
						fallbacks++
					} else if k := killedAt.Load(); d.Source == core.SourceStore && k != 0 && started > k {
						resumed.CompareAndSwap(0, time.Now().UnixNano())
					}
					if d.Allowed {
						if d.Source == core.SourceStore {
							c.store++
						} else {
							c.local++
						}
					}
					time.Sleep(200 * time.Microsecond)
					if !d.Allowed {
						break
					}
				}
			}
		})
	}

	time.Sleep(1500 * time.Millisecond)
	_, r.shortBefore = store.ReplicaWaits()
	old := s.KillMaster()
	kill := time.Now()
	killedAt.Store(kill.UnixNano())
	s.WaitFailover(old)
	r.failover = time.Since(kill)
	_, shortAtFailover := store.ReplicaWaits()
	deadline := time.Now().Add(20 * time.Second)
	for resumed.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if resumed.Load() != 0 {
		r.resumed = time.Unix(0, resumed.Load()).Sub(kill)
		time.Sleep(time.Second) // decisions on the new master
	}
	close(stop)
	wg.Wait()
	if resumed.Load() == 0 {
		t.Fatalf("no store decision within 20 s of the failover: the limiter did not resume on the new master")
	}
	if n := errs.Load(); n > 0 {
		t.Errorf("%d decisions returned an error to the caller, want 0", n)
	}
	if r.fallbacks == 0 {
		t.Error("no fallback decision while the master was down")
	}
	var short int64
	r.waits, short = store.ReplicaWaits()
	r.shortKill = shortAtFailover - r.shortBefore
	r.shortAfter = short - shortAtFailover

	// Ask every key the store admitted units for until the new master
	// denies it.
	audit := testkit.Limiter(t, redisstore.New(rdb), policy, core.WithTimeout(5*time.Second), core.WithDenyCache(0))
	for key, c := range counts {
		r.localAdmitted += c.local
		if c.store == 0 {
			continue
		}
		r.keys++
		r.storeAdmitted += c.store
		more := int64(0)
		for {
			d, err := audit.Allow(ctx, key)
			if err != nil || d.Source != core.SourceStore {
				t.Fatalf("audit Allow(%s) = %+v, %v; want a decision of the new master", key, d, err)
			}
			if !d.Allowed {
				break
			}
			more++
		}
		if total := c.store + more; total > failoverLimit {
			r.over += total - failoverLimit
			r.overKeys++
		}
	}
	return r
}

// TestRedisSentinelFailover kills the master of a Sentinel deployment
// under load, three times: on plain loopback replication; with the
// replica 50 ms behind (a replica under load or in another zone) and the
// master's host crashing with it; and the same with WithWaitReplicas(1,
// 100 ms). Each time the limiter must keep answering (FailLocal while the
// master is gone) and resume on the promoted replica; the over-admission
// is measured and logged. With WAIT, every unit admitted beyond the limit
// must be one whose WAIT was not acknowledged (in flight when the master
// died), so it is bounded by the admissions in flight.
func TestRedisSentinelFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("Redis-backed test skipped in -short mode")
	}
	const lag = 50 * time.Millisecond
	var noWait, withWait failoverRun
	t.Run("Loopback", func(t *testing.T) {
		r := runFailover(t, 0)
		t.Logf("loopback replication, no WAIT: %v", r)
	})
	t.Run("Lag", func(t *testing.T) {
		noWait = runFailover(t, lag)
		t.Logf("replica %v behind, no WAIT: %v", lag, noWait)
	})
	t.Run("LagWaitReplicas", func(t *testing.T) {
		withWait = runFailover(t, lag, redisstore.WithWaitReplicas(1, 100*time.Millisecond))
		t.Logf("replica %v behind, WithWaitReplicas(1, 100ms): %v", lag, withWait)
		// Only an admission no replica acknowledged can be lost.
		if unacked := withWait.shortBefore + withWait.shortKill; withWait.over > unacked {
			t.Errorf("with WAIT, %d units were admitted beyond the limit, but only %d admissions before the failover went unacknowledged", withWait.over, unacked)
		}
		if withWait.waits == 0 {
			t.Error("ReplicaWaits() counted no wait")
		}
	})
	if t.Failed() {
		return
	}
	t.Logf("over-admission at failover with the replica %v behind: %d units without WAIT, %d with WithWaitReplicas(1, 100ms)", lag, noWait.over, withWait.over)
	// Without WAIT the loss is the admissions of the last 50 ms, with WAIT
	// at most those in flight: one per goroutine. Compare only when the
	// run without WAIT lost more than that, as it does unless the machine
	// stalled the load just before the kill.
	if noWait.over > failoverGoroutines && withWait.over >= noWait.over {
		t.Errorf("over-admission with WAIT %d, without %d: want lower", withWait.over, noWait.over)
	}
}

// TestRedisMinReplicasToWrite: with min-replicas-to-write 1, a master
// that has lost its replica refuses the limiter's scripts (NOREPLICAS);
// the limiter decides by its failure policy instead of admitting on a
// master whose writes no replica keeps, and reports the errors.
func TestRedisMinReplicasToWrite(t *testing.T) {
	master := redistest.Start(t, redistest.WithArgs("--repl-diskless-sync-delay", "0"))
	replica := redistest.Start(t)
	ctx := context.Background()
	host, port, _ := strings.Cut(master.Addr(), ":")
	replica.Do(t, "REPLICAOF", host, port)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(fmt.Sprint(master.Do(t, "INFO", "replication")), "state=online") {
		if time.Now().After(deadline) {
			t.Fatal("the replica did not come online")
		}
		time.Sleep(20 * time.Millisecond)
	}
	master.Do(t, "CONFIG", "SET", "min-replicas-to-write", "1")
	master.Do(t, "CONFIG", "SET", "min-replicas-max-lag", "1")

	var noReplicas atomic.Int64
	l := testkit.Limiter(t, redisstore.New(master.Client(t)), core.Policy{Name: "mr", Rules: []core.Rule{{Limit: 5, Window: time.Minute}}},
		core.WithTimeout(time.Second), core.WithBreaker(0, 0),
		core.WithObserver(core.ObserverFunc(func(_ context.Context, e core.Event) {
			if e.Kind == core.EventStoreError && strings.Contains(e.Err.Error(), "NOREPLICAS") {
				noReplicas.Add(1)
			}
		})))
	if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed || d.Source != core.SourceStore {
		t.Fatalf("Allow with the replica up = %+v, %v; want allowed by the store", d, err)
	}
	replica.Stop()
	// The master counts the replica as gone after min-replicas-max-lag
	// without an acknowledgement (replicas acknowledge every second).
	start := time.Now()
	var d core.Decision
	for {
		var err error
		d, err = l.Allow(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if d.Source.Fallback() || time.Since(start) > 10*time.Second {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("first fallback %v after the replica stopped: Allowed=%v Source=%v", time.Since(start).Round(time.Millisecond), d.Allowed, d.Source)
	if d.Source != core.SourceLocal || !d.Allowed {
		t.Fatalf("Allow with no replica = %+v, want an admission by the local fallback", d)
	}
	if noReplicas.Load() == 0 {
		t.Error("the observer saw no NOREPLICAS store error")
	}
}
