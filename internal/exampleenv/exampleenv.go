// Package exampleenv holds what ratekit's example programs share: the
// choice of store. It is internal so that the examples stay short without
// making it part of the API.
package exampleenv

import (
	"context"
	"log"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfunc"
)

// Store returns the store an example program limits with: a
// [core.RedisStore] on REDIS_URL (for example redis://localhost:6379/0)
// when it is set, so that several instances share their limits, else a
// [core.MemoryStore]. It logs which one it chose and exits the program if
// REDIS_URL does not parse. A Redis that does not answer yet is not fatal:
// limiters decide locally until it does (core.FailLocal, the default).
// The Redis client lives as long as the program.
func Store() core.Store {
	url := os.Getenv("REDIS_URL")
	if url == "" {
		log.Print("store: in-process memory (set REDIS_URL to share limits through Redis)")
		return core.NewMemoryStore()
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		log.Fatal("REDIS_URL is not a valid redis:// URL") // it may hold a password: do not print it
	}
	opt.ContextTimeoutEnabled = true // so the limiter's store timeout holds
	rdb := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		log.Printf("store: Redis at %s does not answer yet (%v); deciding locally meanwhile", opt.Addr, err)
	} else {
		log.Printf("store: Redis at %s", opt.Addr)
	}
	return core.NewRedisStore(rdb)
}

// ClientIP returns the client-IP key for an example's -trusted-proxy flag:
// the peer address when cidr is empty, else the forwarded client address
// from proxies inside cidr. It exits the program if cidr does not parse.
func ClientIP(cidr string) keyfunc.Func {
	if cidr == "" {
		return keyfunc.ClientIP()
	}
	trusted, err := keyfunc.ParseTrustedProxies(cidr)
	if err != nil {
		log.Fatal(err)
	}
	return keyfunc.ClientIP(keyfunc.TrustedPrefixes(trusted...))
}

// Secret returns the key-hashing secret in the environment variable env,
// or nil (ratekit's public default key) with a warning naming what is
// hashed.
func Secret(env, what string) []byte {
	if s := os.Getenv(env); s != "" {
		return []byte(s)
	}
	log.Printf("%s is not set: %s are hashed with ratekit's public default key", env, what)
	return nil
}
