// Package memstore is ratekit's memory store, the [driver.Store] that
// keeps windows in the app's own process: core.MemoryStore (an alias of
// [Store]), the store of a single instance, and the local fallback of a
// limiter on a shared store (FailLocal).
//
// Its exported methods are the driver contract's. What the engine needs
// beyond it, for its fallback and to decide in place on its own memory
// store, is reached through functions of this package ([PolicyOf],
// [LeasesOf], [Len], [NewRefusalLog]), which an app cannot import.
//
// The files follow the Lua library of the Redis drivers: the store, its
// shards, sweeping and eviction (store.go); the sliding log (log.go); the
// sliding buckets (buckets.go); calendar periods, lockouts and challenges
// (more.go); what a limiter's fallback mirrors of a shared store's
// decisions (mirror.go); leases (lease.go) and refusals (refused.go).
package memstore
