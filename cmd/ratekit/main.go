// Command ratekit inspects, resets and grants ratekit's rate-limit state in
// Redis, for support staff and operators.
//
//	ratekit peek -policy login-ip 192.0.2.1
//	ratekit peek -policy api -rules 10/1s,1000000/month@Europe/Paris app-42
//	RATEKIT_KEY_SECRET=... ratekit peek -policy login-account -rules 5/15m,20/24h -account alice@example.com
//	RATEKIT_KEY_SECRET=... ratekit reset -policy sms-phone -phone -region CN 138-0013-8000
//	ratekit grant -policy api -extra 10000 -for 24h -note "launch day" app-42
//	ratekit policies
//
// # Keys and identifiers
//
// A KEY is the key as the app's key function returned it (an IP address,
// an AppKey), unless -account or -phone says it is an identifier: then
// ratekit derives the stored key as package keyfunc/personal does
// (personal.AccountKey, personal.PhoneKey): the same normalisation, and by
// default an HMAC pseudonym under the app's secret, which it reads from
// RATEKIT_KEY_SECRET, never from a flag, so that it stays out of shell
// history. -region gives the app's default phone region and -cleartext
// says the app stores the normalised value itself. peek shows the stored
// key it derived. Without these flags, a peek of "alice" looks at a key
// the app never uses, and a reset deletes nothing.
//
// # Redis
//
// It connects to REDIS_URL (redis://[[user]:password@]host:port/db), and
// says where on stderr first, with the password hidden and the database
// named when the URL names none. reset refuses to run without REDIS_URL;
// peek and policies default to redis://127.0.0.1:6379/0, and say so again
// when they find nothing there. As the library runs on Redis Cluster and
// Sentinel, so does the command: REDIS_URL may name any node of a Cluster
// (it asks the node, then works on the whole Cluster: a key held by
// another node is read and reset there, and policies scans every master);
// for Sentinel it names a sentinel, with ?master_name=NAME (go-redis's
// ParseFailoverURL), which may be left out when the sentinel monitors one
// master only.
//
// # What peek reads
//
// peek reads by itself everything Redis holds for the key: the admission
// time of each unit (sliding log) or the bucket counts (sliding buckets),
// the count of each calendar period, a lockout with its end and
// offences, and the leases of requests in flight. A lockout in force
// answers "denied, locked out until ..." with the Retry-After the app
// sends. Redis does not hold the policy's limits, only what was admitted,
// so to say whether a request fits the rules now, and what remains of
// each, peek takes them with -rules, the app's; it then decides through
// a [core.Limiter] of its own ([core.Limiter.Peek]). The command reads the
// store rather than a registry that apps would publish their policies to:
// it works for every app as it is, and what it shows cannot go stale
// when an app changes its rules. policies lists the policy names found in
// Redis by scanning key names.
//
// reset goes through a [core.Limiter] of its own ([core.Limiter.Reset])
// and says per key how many Redis keys it deleted.
//
// # Exit status
//
// 0 when the command did its work (for peek: Redis holds something for
// the key), 1 when Redis could not be reached or failed, 2 for a mistake
// on the command line (the error and one line of help; ratekit help
// prints every flag), and 3 when a lookup found nothing: a peek of a key
// Redis holds nothing for, a reset of such a key, policies under a
// prefix with no key. Then stderr says what was looked for and where,
// with a hint at the likely mistake: an account name or a phone number
// given as a key (the app stores a pseudonym: -account, -phone), a
// RATEKIT_KEY_SECRET that is not the app's, REDIS_URL unset or naming no
// database, a wrong -policy or -prefix.
//
// A reset deletes the key's windows, lockout and calendar counts in Redis
// and publishes the key on the store's invalidation channel
// (<prefix>:invalidate), so every app instance whose Redis store has the
// same prefix drops its cached denials of the key (a lockout's included)
// when the message arrives: the key is admitted everywhere at once, not
// after the denials' retry times.
//
// Flags may come before or after the keys; the usage text (ratekit help)
// lists them.
package main

import (
	"context"
	"os"
	"os/signal"
	_ "time/tzdata" // -rules takes time zones (month@Europe/Paris) on hosts without a zone database

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"

	"github.com/ratekit/ratekit/cmd/ratekit/internal/cli"
)

func main() {
	// go-redis logs dial failures itself, on stderr; the command reports
	// them once, in its own words.
	redis.SetLogger(&logging.VoidLogger{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := cli.Run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
