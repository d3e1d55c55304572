// Package core makes ratekit's rate-limit decisions: a [Limiter] admits or
// denies requests of one [Policy], key by key, on a [Store]. It knows
// nothing of HTTP or of who is limited: package guard turns requests into
// keys and decisions into answers for every framework adapter, and package
// keyfunc says who is limited.
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
// thousands per key. [SlidingBuckets] is meant for large quotas: memory
// per key is bounded, it never admits more than the limit, and in return
// it may under-admit by one bucket and make a client wait up to one bucket
// longer than the window (Window + Window/Buckets: 61 s for a minute split
// into the default 60 buckets).
//
// # Lockouts and calendar quotas
//
// Policy.Lockout keeps a key refused for a while after a denial, even if
// it stops trying (20 failed logins an hour lock an address out for a
// day), optionally longer on each repeat offence; [Decision.Locked]
// reports it, and [Limiter.Reset] lifts it. A rule with a Calendar
// counts per calendar Day, Week or Month in its Location instead of a
// sliding window (1,000,000 requests a month from 00:00 on the 1st in the
// customer's time zone), alongside the sliding rules of the policy, under
// either algorithm. Both live in the store next to the key's windows.
//
// # Challenge before lockout
//
// A rule's Challenge is a soft threshold below its Limit: login
// protection asks for a CAPTCHA or a second factor after a few failures
// and refuses only after more. A request that would bring the count to
// the threshold is challenged ([Decision.Challenged]) unless the key has
// passed a challenge lately ([Limiter.Pass]); a challenged request
// records nothing, so it counts toward no limit, and the requests after a
// pass count up to the Limit as any other. The store decides the
// challenge in the same atomic step as the rules and keeps the pass with
// the key's counts, so it is exact across instances, and [Limiter.Reset]
// forgets both.
//
// # Stores
//
// A [Store] keeps the windows; it is the whole contract between a limiter
// and where its counts live, with optional capabilities ([driver.Local],
// [driver.Leases], [driver.Challenges], [driver.Invalidator], [driver.Fleet], [driver.Partitioned],
// [driver.Checker], [driver.Refusals]) a limiter looks for when it is built.
// [MemoryStore] keeps them in one process.
// The Redis drivers beside this package (redisstore on go-redis,
// rueidisstore on rueidis) share them between app instances: each
// decision is one Lua function run atomically by Redis on one key per
// (policy, key), named <prefix>:<policy>:{<key>}; the braces are a Redis
// Cluster hash tag, so a decision touches one slot and runs on Cluster
// unchanged. Time comes from the Redis server in microseconds, and
// concurrent decisions share round trips. This package links no Redis
// client.
//
// # When the store fails
//
// Every store call is bounded by a timeout (20 ms by default). A timeout
// means the store did not answer, not that this process was too busy to
// read its answer: while the process is starved of CPU the wait goes on
// (see [WithTimeout]), so a saturated app on a healthy Redis stays exact.
// When the store errs or times out, the [FailurePolicy] decides:
// [FailLocal] (the default) decides with an in-process store so the
// service stays up and protected, [FailOpen] admits, [FailClosed] denies
// (adapters answer 503). Under FailLocal each instance starts from what it
// learned through the store (its own admissions in the current windows,
// the lockouts it saw) and admits its share of each limit, the limit
// divided by the instances that use the policy (see [WithLocalShare]). A
// circuit breaker stops calling a failing store for a cool-down, so a
// dead Redis does not add a timeout to every request, and a deny cache
// answers floods from a denied key locally until its RetryAfter. The
// [Decision]'s Source tells a fallback from a normal decision; failures
// go to the [Observer], and a limiter that starts or stops deciding by its
// failure policy says so once ([EventFallbackStart], [EventFallbackEnd]),
// through log/slog when it has no observer.
//
// # Concurrency limits
//
// A policy with InFlight set limits requests in flight instead of
// requests per window: at most InFlight of a key at once however many
// instances decide, for exports, reports or long downloads. An admission
// holds a lease until its [Decision] is refunded, when the request ends.
// On Redis the leases of a key are one sorted set in the key's slot,
// <prefix>:<policy>:{<key>}:lease, each lease scored by its expiry; a
// lease not renewed for Policy.LeaseTTL (30 s by default) is reclaimed,
// so the requests of an instance that died come back. A limiter renews
// the leases it holds every third of that TTL from one goroutine, which
// ends once it holds none, so a request may run for any time. A
// denial's RetryAfter is a fixed hint of one second: no store can foresee
// when a request ends. The failure policies, breaker and observers apply
// as for rate limits; a lease of the local fallback store (FailLocal)
// counts on its instance only.
//
// A Redis that evicts keys under memory pressure forgets windows: see
// [ErrUnsafeEviction] for the safe settings, and call [Limiter.Check] at
// start-up to report a server that can evict limiter keys.
//
// # Who is being limited
//
// Every limiter counts the requests it refuses, key by key, in fixed
// memory (Space-Saving sketches of 256 keys; a flood of a key already
// denied costs an atomic add on its deny-cache entry), and adds the
// counts to its store every 5 seconds while it refuses requests, from a
// goroutine that a timer starts and that ends with the flush.
// [Limiter.TopRefused] returns the keys refused most in the last five
// minutes, summed over every instance that shares the store; the Redis
// drivers keep them per policy and minute in a sorted set of at most
// 1,000 keys, <prefix>:<policy>:refused:{<policy>}:<minute>. No metric
// carries a key.
//
// # Exceptions
//
// [Limiter.Grant] gives one key more units on every rule, or exempts it,
// until a time at most 30 days away: the store keeps the grant beside the
// key's counts (on Redis <prefix>:<policy>:{<key>}:grant, expiring by
// itself) and reads it in the same atomic step as it decides, so a grant,
// its revocation and its end hold at once on every instance, exactly.
// [Policy].Allow and Deny decide listed keys (exact keys, or CIDR prefixes
// over address keys) without the store; a listed key takes no grant.
//
// # Hot keys
//
// Every decision on a key runs on the one Redis node that holds the key's
// slot. A key too hot for one node, typically a global cap, can be split
// with Policy.Shards = N into N store keys "<key>#0" … "<key>#N-1", each
// its own hash tag and so its own slot. Shard i holds, for every rule, the
// share Limit/N, plus one unit for the first Limit%N shards; the shares
// sum to the limit. Requests go to the shards in turn. The trade-off:
//
//   - It never admits more than a rule's Limit in any window, however
//     many instances decide: the key's admissions are the sum of its
//     shards', each exact and at most its share.
//   - It can deny early. A request is decided by its shard alone, so it is
//     denied when that shard is full even if others have room; the next
//     requests go to the other shards and are admitted. Under steady
//     traffic from one instance the shards fill and empty in step and no
//     request is denied before the key holds its limit; under bursts that
//     expire unevenly, or several instances, a denial can come when the
//     key holds as little as one share (Limit/N) in its window.
//   - A decision describes its shard: Limit and Remaining are the shard's
//     share, and a denial's RetryAfter is when that shard has room again
//     (another may have room sooner).
//   - A request may cost at most the smallest share.
//   - Each key costs N store keys, and Reset makes N store calls.
//
// Shard only keys that need it: per-client keys spread over a cluster by
// themselves.
package core
