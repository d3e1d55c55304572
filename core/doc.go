// Package core makes ratekit's rate-limit decisions: a [Limiter] admits or
// denies requests of one [Policy], key by key, on a [Store], and a [Guard]
// turns a decision into the answer every framework adapter writes.
//
// # Policies and the algorithm
//
// A [Rule] is "at most Limit units in any sliding Window"; a [Policy] holds
// one or more rules that must all hold, such as 1 per minute AND 5 per hour
// AND 10 per day for verification codes. The default algorithm,
// [SlidingLog], records one entry per admitted unit and is exact: it never
// admits more than a rule allows in any window, however requests are
// spread, and a denial's RetryAfter is the exact moment the same request
// would fit. Memory grows with the limit, which suits limits up to some
// thousands per key. [SlidingBuckets] is meant for large quotas.
//
// # Stores
//
// [RedisStore] shares windows between app instances. Each decision is one
// Lua script run atomically by Redis on one sorted set per (policy, key),
// named <prefix>:<policy>:{<key>}; the braces are a Redis Cluster hash
// tag, so a decision touches one slot and runs on Cluster unchanged. Time
// comes from the Redis server in microseconds. [MemoryStore] has the same
// semantics in one process.
//
// # When the store fails
//
// Every store call is bounded by a timeout (20 ms by default). When the
// store errs or times out, the [FailurePolicy] decides: [FailLocal] (the
// default) decides with an in-process store so the service stays up and
// protected, [FailOpen] admits, [FailClosed] denies (adapters answer 503).
// A circuit breaker stops calling a failing store for a cool-down, so a
// dead Redis does not add a timeout to every request, and a deny cache
// answers floods from a denied key locally until its RetryAfter. The
// [Decision]'s Source tells a fallback from a normal decision; failures go
// to the [Observer].
package core
