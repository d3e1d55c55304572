// Package rueidisstore is ratekit's Redis driver on rueidis: a
// [driver.Store] shared by every app instance on one Redis (standalone,
// Sentinel or Cluster), with every capability the core package defines.
// It keeps the same keys, in the same layout, as the go-redis driver
// (redisstore), so instances on either driver share one Redis and one
// prefix. A program that keeps its limits in memory, or uses redisstore,
// does not link it, nor rueidis.
//
//	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"localhost:6379"}})
//	store := rueidisstore.New(client)
//	login, err := core.NewLimiter(store, core.Policy{Name: "login", Rules: []core.Rule{{Limit: 5, Window: time.Minute}}})
//
// Each decision is one call of ratekit's Lua library (a Redis Function
// library on Redis 7, scripts before), atomic on the one slot of its key;
// concurrent decisions share calls. See [Store] for what it keeps in
// Redis, how it batches, and what a failing Redis costs.
//
// rueidis.NewClient dials at once, and returns no client while Redis is
// down, where go-redis makes one without dialling: an app that must start
// during an outage (its limiters deciding by their failure policy until
// Redis answers) sets rueidis.ClientOption.ForceSingleClient on a single
// server, which returns a client with the dial's error that connects
// once Redis answers, or retries rueidis.NewClient at start on a Cluster
// or Sentinel, or uses redisstore.
package rueidisstore
