// Command ratekit inspects and resets ratekit's rate-limit state in
// Redis, for support staff and operators.
//
//	ratekit peek -policy login -rules 5/15m,20/24h alice@example.com
//	ratekit reset -policy login alice@example.com
//	ratekit policies
//
// It connects to REDIS_URL (redis://[:password@]host:port/db; default
// redis://127.0.0.1:6379/0). It has no registry of the app's limiters, so
// peek takes the policy's rules on the command line: Redis keeps
// admission times, and the rules say how to count them, so they must be
// the app's. policies lists the policy names found in Redis by scanning
// key names.
//
// A reset deletes the key's windows in Redis at once. App instances that
// denied the key recently may still deny it from their in-process deny
// cache until that denial's retry time; resetting through the app's
// admin handler (package opshttp) also clears that instance's cache.
package main

import (
	"context"
	"os"
	"os/signal"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
