// Package ratekittest runs an app's rate limits in its own tests on a
// clock the test moves: use up a key, check the 429, its Retry-After and
// its headers, move the clock on, and see the key admitted again — with
// no sleeps and no Redis, through any adapter, for every kind of policy
// (sliding windows, buckets, calendar periods, lockouts, challenges and
// concurrency limits).
//
// A [Clock] reads the same time until the test moves it ([Clock.Advance],
// [Clock.Set]). A [Store] is an in-process store, as core.MemoryStore,
// whose decisions are made at its clock's time. Give it wherever the app
// takes a store: to core.NewLimiter, or to a one-liner with
// guard.WithStore:
//
//	clock := ratekittest.NewClock()
//	store := ratekittest.NewStore(clock)
//	h := nethttp.LimitByIP(3, time.Minute, guard.WithStore(store))(hello)
//	// ... three requests answer 200, the fourth 429 with Retry-After: 60
//	clock.Advance(time.Minute)
//	// ... and the next answers 200 again
//
// [NewLimiter] does both in one call for a policy, and fails the test,
// naming the field, when the policy cannot work.
//
// What the kit decides is what the Redis stores decide at the same time:
// the package's tests run the same steps on the kit and on redisstore and
// rueidisstore (with core.WithClock) and compare every decision. Two
// things differ from production, by design: a concurrency limit's leases
// (core.Policy.InFlight) never expire on their own, as a live instance's
// are renewed, so a test must end its requests (refund their decisions)
// to free them; and waits (core.Limiter.WaitN, nethttp.Transport, the
// gRPC client interceptors) sleep on the process's clock, not on the
// kit's: give them a context with a deadline, and a wait that would pass
// it fails at once.
//
// The package links core alone: it adds no Redis client to an app's
// build.
package ratekittest
