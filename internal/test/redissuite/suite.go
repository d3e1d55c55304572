// Package redissuite is the suite every Redis driver of ratekit passes
// (redisstore on go-redis, rueidisstore on rueidis): what the engine does
// on a real Redis, written once for both drivers. It covers exactness
// across app instances, the deny cache and the invalidations that reach
// it, the failure policies and the circuit breaker while Redis is stopped,
// paused, slowed or drops its connections (through redistest's fault
// proxy), leases, waits, tiers, shards, lockouts, calendar rules,
// challenges, the refusals kept, checks of the server's configuration, and
// Redis Cluster.
//
// A driver's tests run it with a [Driver], which builds stores of that
// driver on the servers the suite starts with internal/test/redistest:
//
//	func TestSuite(t *testing.T) { redissuite.Run(t, driver) }
//	func TestTimed(t *testing.T) { redissuite.RunTimed(t, driver) }
//
// [Run] holds every case whose assertions hold on a loaded machine.
// [RunTimed] holds the cases timed against the wall clock (a decision
// bounded by the store timeout while Redis is paused or down, exactness
// with the app's CPU saturated): they need the machine to themselves, so
// `make test` skips every test named TestTimed and `make test-timing` runs
// them alone. Both skip with -short.
//
// The driver conformance suite, which any store passes, is
// core/driver/drivertest; this suite runs it too, on one server and on a
// Cluster.
package redissuite

import (
	"slices"
	"sync/atomic"
	"testing"

	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/internal/test/redistest"
	"github.com/ratekit/ratekit/internal/test/testkit"
)

// Store is what the suite needs of a store: every capability of a store
// shared by app instances, and the name of a key in Redis.
type Store interface {
	driver.SharedProfile
	// Key returns the Redis key of key (already bounded) under policy.
	Key(policy, key string) string
	// Close withdraws the store's announcements (a reload's store
	// dropped); its client stays open.
	Close()
}

// Conf says how to build a store and its client. The zero value but
// Addrs is the driver's defaults.
type Conf struct {
	// Addrs is where the client connects: a server (or a proxy in front of
	// one), or every node of a Cluster.
	Addrs []string
	// Cluster makes the client a Cluster client of Addrs.
	Cluster bool
	// Prefix is the store's key prefix; "" keeps the driver's default.
	Prefix string
	// Batching bounds the decisions of one script call; 0 keeps the
	// driver's default.
	Batching int
	// NoRetry makes the client send no command twice after a failed
	// attempt (go-redis: MaxRetries -1; rueidis: DisableRetry).
	NoRetry bool
	// Quiet makes the client use one connection and send nothing on it by
	// itself (no health checks, no client-side cache), with fast retries
	// where the client retries at all: the next request a proxy sees is
	// the store's next call.
	Quiet bool
	// ContextTimeout makes a client that would otherwise ignore context
	// deadlines on its reads honour them (go-redis:
	// ContextTimeoutEnabled); a client that always does ignores it.
	ContextTimeout bool
	// Username, Password and DB are the client's credentials and database.
	Username, Password string
	DB                 int
	// Commands, when not nil, counts every command the client sends.
	Commands *atomic.Int64
	// Redirects, when not nil and the driver can ([Driver.Redirects]),
	// counts the redirects and TRYAGAIN answers a Cluster client meets.
	Redirects *Redirects
}

// Redirects counts what the nodes of a Cluster answered instead of a
// reply.
type Redirects struct {
	Ask, Moved, TryAgain atomic.Int64
}

// A Driver builds stores of one Redis driver for the suite.
type Driver struct {
	// Name names the driver in messages: "redisstore", "rueidisstore".
	Name string
	// Connect returns a store on a client of its own built as conf says,
	// and a function that closes the client at once, as when an app
	// instance dies. The store and its client are closed when t ends. It
	// fails t when the client cannot be built.
	Connect func(t testing.TB, conf Conf) (s Store, closeClient func())
	// ErrPrefix starts every error of the driver's stores:
	// "redisstore: ".
	ErrPrefix string
	// LazyDial reports that the client connects on first use, so that a
	// store can be built on a server that refuses its connections (a
	// password or database it lacks): its Check then names the reason.
	LazyDial bool
	// Redirects reports that Connect counts Conf.Redirects.
	Redirects bool
	// Redials reports that the client sends a call again on a new
	// connection when the server closed the one it used (go-redis
	// retries it), so that a server restarted between two decisions is
	// transparent to the second; a client that sends no write twice
	// (rueidis) fails that call, and the failure policy decides it.
	Redials bool
	// Replies reports that the driver's stores tell whether their server
	// sent anything since a call began ([driver.Replies]).
	Replies bool
	// DropsAbandoned reports that the client may drop a call whose
	// caller gave up before the server ran it (rueidis can close the
	// connection of a call whose deadline passed, and Redis then drops
	// what it had not run of it). A client that keeps the call (go-redis
	// on default options) has it run once the server answers again, for
	// nobody.
	DropsAbandoned bool
}

// Open returns a store of d built as conf says.
func (d Driver) Open(t testing.TB, conf Conf) Store {
	t.Helper()
	s, _ := d.Connect(t, conf)
	return s
}

// New returns a store of d on srv with the driver's defaults.
func (d Driver) New(t testing.TB, srv *redistest.Server) Store {
	t.Helper()
	return d.Open(t, Conf{Addrs: []string{srv.Addr()}})
}

// on returns conf with Addrs set to srv's address.
func on(srv *redistest.Server, conf Conf) Conf {
	conf.Addrs = []string{srv.Addr()}
	return conf
}

// onCluster returns conf with Addrs set to every node of c.
func onCluster(c *redistest.Cluster, conf Conf) Conf {
	conf.Addrs, conf.Cluster = c.Addrs(), true
	return conf
}

// suiteCase is one test of the suite: an engine test of core's before it
// moved here, under the name it had without "Test".
type suiteCase struct {
	name string
	f    func(t *testing.T, drv Driver)
}

// Run runs every case of the suite that holds on a loaded machine, each as
// a subtest named after the test it was in core (TestRedisExactness is
// Run's RedisExactness). Cases that ran in parallel still do.
func Run(t *testing.T, drv Driver) { run(t, drv, suiteCases()) }

// suiteCases are the cases of Run.
func suiteCases() []suiteCase {
	return []suiteCase{
		// Stores and exactness (redis.go).
		{"Store", testStore},
		{"RedisExactness", testRedisExactness},
		{"RedisClassic", testRedisClassic},
		{"RedisSameInstant", testRedisSameInstant},
		{"RedisMultiRule", testRedisMultiRule},
		{"RedisRetryCountedOnce", testRedisRetryCountedOnce},
		{"RedisLibraryReload", testRedisLibraryReload},
		{"RedisDenyCache", testRedisDenyCache},
		{"RedisDenyCacheAcrossInstances", testRedisDenyCacheAcrossInstances},
		{"PeekIsNotADecision", testPeekIsNotADecision},
		{"RedisClientTimeTTL", testRedisClientTimeTTL},
		{"RedisMatchesMemory", testRedisMatchesMemory},
		{"RedisBatchingExact", testRedisBatchingExact},
		{"HostileKeysOnRedis", testHostileKeysOnRedis},
		{"HostileRandomKeyFlood", testHostileRandomKeyFlood},
		{"HostileHugeCost", testHostileHugeCost},
		{"HashAliases", onRedis(testkit.HashAliases)},
		// Faults and fallbacks (faults.go, fallback.go).
		{"RedisScriptsAfterRestart", testRedisScriptsAfterRestart},
		{"FailLocalShare", testFailLocalShare},
		{"FailLocalRemembers", testFailLocalRemembers},
		{"FallbackNotices", testFallbackNotices},
		{"FallbackEndWithoutTraffic", testFallbackEndWithoutTraffic},
		// Checks of the server (health.go).
		{"RedisCheckPolicies", testRedisCheckPolicies},
		{"LimiterCheck", testLimiterCheck},
		{"RedisEviction", testRedisEviction},
		{"RedisCheckMisconfigured", testRedisCheckMisconfigured},
		// Modes of the engine on Redis.
		{"InFlightExact", testInFlightExact},
		{"InFlightDeadInstance", testInFlightDeadInstance},
		{"InFlightRenewalTicker", testInFlightRenewalTicker},
		{"InFlightRefundOnce", testInFlightRefundOnce},
		{"InFlightCost", testInFlightCost},
		{"InFlightRedisLayout", testInFlightRedisLayout},
		{"InFlightStoreDown", testInFlightStoreDown},
		{"LeasesAcrossInstances", testLeasesAcrossInstances},
		{"WaitNoStampede", onRedis(testkit.WaitNoStampede)},
		{"WaitFailClosed", testWaitFailClosed},
		{"TiersUsageCarriesOver", onRedis(testkit.TiersUsageCarriesOver)},
		{"RedisTierInvalidationAcrossInstances", testRedisTierInvalidationAcrossInstances},
		{"ShardsNeverOverAdmit", onRedis(testkit.ShardsNeverOverAdmit)},
		{"ShardsRedisKeys", testShardsRedisKeys},
		{"RedisLockoutAcrossInstances", testRedisLockoutAcrossInstances},
		{"RedisLockoutKeys", testRedisLockoutKeys},
		{"LockoutFailLocal", testLockoutFailLocal},
		{"RedisCalendarExactness", testRedisCalendarExactness},
		{"RedisCalendarKeyBounded", testRedisCalendarKeyBounded},
		{"CalendarTiers", onRedis(testkit.CalendarTiers)},
		{"CalendarShards", onRedis(testkit.CalendarShards)},
		{"SlidingBucketsRetryAfterBound", onRedis(testkit.SlidingBucketsRetryAfterBound)},
		{"ChallengeFleet", onRedis(testkit.ChallengeFleet)},
		{"GrantFleet", onRedis(testkit.GrantFleet)},
		{"ChallengeFailLocal", testChallengeFailLocal},
		{"ChallengeResetReachesFallback", testChallengeResetReachesFallback},
		{"RefundOnce", onRedis(testkit.RefundOnce)},
		{"RefundFailureReported", testRefundFailureReported},
		{"TopRefusedFleet", onRedis(testkit.TopRefusedFleet)},
		{"TopRefusedCounts", testTopRefusedCounts},
		{"TopRefusedBound", testTopRefusedBound},
		{"DeniedPathAllocs", testDeniedPathAllocs},
		{"RedisLogShrinks", testRedisLogShrinks},
		// Transitions: outages' ends, late replies, resets while Redis
		// fails, fleets that differ (transitions.go).
		{"OutageEndCounts", testOutageEndCounts},
		{"OutageEndFleet", testOutageEndFleet},
		{"OutageEndDenied", testOutageEndDenied},
		{"LateRepliesCount", testLateRepliesCount},
		{"ResetReachesFallback", testResetReachesFallback},
		{"ResetThroughBreaker", testResetThroughBreaker},
		{"RefusedFlushTimedOut", testRefusedFlushTimedOut},
		{"FleetRulesDiffer", testFleetRulesDiffer},
		{"FleetKeepsLongestWindow", testFleetKeepsLongestWindow},
		{"FleetCloseWithdraws", testFleetCloseWithdraws},
		{"PruneLibraries", testPruneLibraries},
		// Redis Cluster (cluster.go).
		{"RedisCluster", testRedisCluster},
	}
}

// RunTimed runs the cases of the suite timed against the wall clock: how
// long a decision takes while Redis is paused, stopped or slowed (bounded
// by the store timeout), exactness with the app's CPU saturated, and
// other bounds of milliseconds. They hold on a quiet machine only, since
// a limiter rightly waits on while other processes starve its own: `make
// test-timing` runs them alone.
func RunTimed(t *testing.T, drv Driver) { run(t, drv, timedCases()) }

// timedCases are the cases of RunTimed.
func timedCases() []suiteCase {
	return []suiteCase{
		{"RedisFaults", testRedisFaults},
		{"RedisTimeoutWhilePaused", testRedisTimeoutWhilePaused},
		{"RedisDown", testRedisDown},
		{"InFlightBreakerAndTimeout", testInFlightBreakerAndTimeout},
		{"RedisSaturatedApp", testRedisSaturatedApp},
		{"RedisFrozenSaturatedApp", testRedisFrozenSaturatedApp},
		{"RedisClusterPaused", testRedisClusterPaused},
		// Bounds of tens or hundreds of milliseconds on the wall clock,
		// missed on a loaded machine: a TTL read 20 ms after it was set
		// (RedisKeysExpire), a RetryAfter read within 50 ms of the first
		// admission (RedisLargeLog), a check that returns within 80 ms of
		// its deadline (RedisCheckFails), a release retried within 2 s
		// (InFlightReleaseRetried, missed under 4 busy processes), a
		// waiter woken within 300 ms (WaitInFlight).
		{"RedisKeysExpire", testRedisKeysExpire},
		{"RedisLargeLog", testRedisLargeLog},
		{"RedisCheckFails", testRedisCheckFails},
		{"InFlightReleaseRetried", testInFlightReleaseRetried},
		{"WaitInFlight", onRedis(testkit.WaitInFlight)},
	}
}

// RunNamed runs the cases of Run or RunTimed named names, for a driver
// that runs some of them again in another configuration; a name that is
// no case fails t.
func RunNamed(t *testing.T, drv Driver, names ...string) {
	all := append(suiteCases(), timedCases()...)
	var cases []suiteCase
	for _, name := range names {
		i := slices.IndexFunc(all, func(c suiteCase) bool { return c.name == name })
		if i < 0 {
			t.Fatalf("redissuite: no case %q", name)
		}
		cases = append(cases, all[i])
	}
	run(t, drv, cases)
}

// onRedis is the case of a scenario that must hold on every store,
// written once in internal/test/testkit (core's tests run it on the
// memory store): here on a new server, each instance of the fleet on a
// store of the driver of its own.
func onRedis(scenario func(*testing.T, testkit.Backend)) func(*testing.T, Driver) {
	return func(t *testing.T, drv Driver) { scenario(t, fleetBackend(drv)) }
}

func run(t *testing.T, drv Driver, cases []suiteCase) {
	if testing.Short() {
		t.Skip("redissuite: Redis-backed, skipped with -short")
	}
	if drv.Connect == nil || drv.Name == "" {
		t.Fatal("redissuite: a Driver needs a Name and Connect")
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.f(t, drv) })
	}
}
