package redislib

// Retry says what a driver does with a script call that Redis answered
// with an error. A script call is never sent again blindly (a lost reply
// is counted once): only the errors with which Redis refused the call
// before running it allow a second sending, each with its remedy.
type Retry uint8

// The remedies of a refused script call.
const (
	// RetryNone: the error is the call's answer.
	RetryNone Retry = iota
	// RetryEval: the script is not in the server's cache (NOSCRIPT, after
	// a restart, a SCRIPT FLUSH or a failover): send it again with its
	// source (EVAL), which loads it.
	RetryEval
	// RetryLoad: the library's function is not loaded (a restarted or
	// flushed server, a replica just promoted): load the library, then
	// send the call again.
	RetryLoad
	// RetryScript: a full Redis (OOM) refuses every function call up
	// front, and a script only when it writes: send this call as a
	// script, so that denials are still decided by the store.
	RetryScript
	// RetryScripts: the server has no FCALL (before Redis 7, or renamed
	// away) or an ACL does not permit it: run the library as scripts from
	// now on, and send the call again as one.
	RetryScripts
	// RetryPause: the server refused the call without running it (a
	// replica read-only after a failover, a cluster down, a server
	// loading): send it again after a pause, while the deadline allows.
	RetryPause
	// RetrySplit: a Cluster refused a call of several keys of one slot
	// with TRYAGAIN: the slot is migrating and its keys are split between
	// the two nodes. Send each of its decisions again at once, one key per
	// call, each following its own redirect (ASK); a pause would not help
	// until the migration ends.
	RetrySplit
	// RetryRedirect: a Cluster node answered MOVED or ASK (a call sent to
	// a node directly, or a client out of redirections): the call did not
	// run there. Send it again at once through the cluster client, which
	// follows the redirect.
	RetryRedirect
)

// RetryOf returns the remedy for msg, the message of a Redis error that
// answered a script call of keys keys; script says the call was sent as a
// script (EVALSHA or EVAL), not as a function call (FCALL).
func RetryOf(msg string, script bool, keys int) Retry {
	switch {
	case keys > 1 && TryAgain(msg):
		return RetrySplit
	case Redirect(msg):
		return RetryRedirect
	case NoScript(msg):
		return RetryEval
	case NoFunction(msg):
		return RetryLoad
	case script:
		// A script's remedies end here: past OOM, an unknown EVALSHA or
		// a forbidden one, nothing is left to try.
	case OutOfMemory(msg):
		return RetryScript
	case UnknownCommand(msg) || NoPermission(msg):
		return RetryScripts
	}
	if Refused(msg) {
		return RetryPause
	}
	return RetryNone
}
