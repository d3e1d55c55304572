// Package redisstore is ratekit's Redis driver on go-redis: a [driver.Store]
// shared by every app instance on one Redis (standalone, Sentinel or
// Cluster), with every capability the core package defines. A program
// that keeps its limits in memory does not link it, nor go-redis.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
//	store := redisstore.New(rdb)
//	login, err := core.NewLimiter(store, core.Policy{Name: "login", Rules: []core.Rule{{Limit: 5, Window: time.Minute}}})
//
// Each decision is one call of ratekit's Lua library (a Redis Function
// library on Redis 7, scripts before), atomic on the one slot of its key;
// concurrent decisions share calls. See [Store] for what it keeps in
// Redis, how it batches, and what a failing Redis costs.
package redisstore
