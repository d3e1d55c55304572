// Package driver is the contract between ratekit's engine (package core)
// and any store that keeps its windows, in the style of
// database/sql/driver: one small required interface, [Store], and
// optional capabilities, each an interface of its own with one job, that
// the engine looks for once, when a limiter is built, and never by a
// store's concrete type.
//
// An app does not use this package: it picks a store (core.NewMemoryStore,
// or a Redis driver such as redisstore.New) and hands it to
// core.NewLimiter. A driver imports this package and nothing of the
// engine; the engine converts its own vocabulary (core.Policy, core.Rule)
// into a driver's ([Query], [Rule]) once, when a limiter is built.
//
// What a call carries is a [Query], what a decision returns a [Result] of
// [RuleState] values, one per rule. The capabilities are [Local] (an
// in-process store), [Leases] (concurrency limits), [Challenges] (a soft
// threshold before the limit), [Invalidator] (caches made stale by
// another instance), [Fleet] (the instances sharing a policy),
// [Partitioned] (a store spread over servers), [Checker] (a check of the
// configuration) and [Refusals] (the keys refused most). Two profiles
// name the sets a real store offers: [LocalProfile] for a store in the
// app's process, [SharedProfile] for one shared by the app's instances.
// The suite in package drivertest checks a store against all of it.
//
// This package imports only the standard library.
package driver
