// Package redislib is what ratekit's Redis drivers share whatever their
// client: the Lua library that decides (as a Redis Function library, or
// as scripts on servers without functions), the lease script, the packing
// of a batch of decisions into one call and the decoding of its reply,
// the batcher that gathers concurrent decisions into flights, the names
// of the keys, Cluster slots, and the reading of a server's eviction
// policy. A driver adds its client: connections, commands, pub/sub.
package redislib

import (
	"crypto/sha1"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
)

//go:embed redis.lua
var libSource string

//go:embed lease.lua
var leaseSource string

// The library runs as a Redis Function library where the server has them
// (Redis 7): its helpers are built once when it loads, not on every call.
// Older servers run it as scripts. Its name carries a hash of its text,
// so that instances running different versions of ratekit on one Redis
// each call their own.
var (
	// LibName is the name of the function library.
	LibName = "ratekit_" + hex.EncodeToString(sha256Of(libSource)[:6])
	// LibCode is the library as FUNCTION LOAD takes it.
	LibCode = "#!lua name=" + LibName + "\n" +
		"local function register(name, f) redis.register_function('" + LibName + "_' .. name, f) end\n" + libSource

	logFn      = LibName + "_log"
	bucketsFn  = LibName + "_buckets"
	logScript  = newScript(scriptOf("log"))
	bktScript  = newScript(scriptOf("buckets"))
	leaseScrpt = newScript(leaseSource)
)

// Script is a Lua script and its SHA-1, for EVALSHA.
type Script struct {
	Source, SHA string
}

func newScript(src string) Script {
	h := sha1.Sum([]byte(src))
	return Script{Source: src, SHA: hex.EncodeToString(h[:])}
}

// scriptOf returns the library as a script that runs its function name.
func scriptOf(name string) string {
	return "local fns = {}\nlocal function register(name, f) fns[name] = f end\n" + libSource +
		"\nreturn fns." + name + "(KEYS, ARGV)\n"
}

func sha256Of(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

// LogFunction is the library's function of the sliding log, as FCALL
// takes it.
var LogFunction = logFn

// LogScript is LogFunction as a script.
var LogScript = logScript

// LeaseScript is the script of lease operations (it has no function).
var LeaseScript = leaseScrpt
