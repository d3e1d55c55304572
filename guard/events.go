package guard

import "github.com/ratekit/ratekit/core"

// The kinds of the events the middleware reports to its observers
// ([WithObserver]) beside the limiter's own; [core.EventKind.String]
// names them ("skip", "key_error", "dry_run", "block").
const (
	// EventSkip reports a request the middleware let through without a
	// decision of the policy: a skip predicate matched or the request had
	// no key for it.
	EventSkip = core.EventKind(5)
	// EventKeyError reports a request whose key function failed, or whose
	// cost was invalid; it was answered as a bad request (or as
	// configured). Event.Err holds why.
	EventKeyError = core.EventKind(6)
	// EventDryRun reports a denial that the middleware in dry-run mode let
	// through; Event.Decision holds it. The limiter reported the denial
	// itself as a core.EventDecision.
	EventDryRun = core.EventKind(7)
	// EventBlock reports a request the middleware refused without a
	// decision because a block rule matched it (403 Forbidden).
	EventBlock = core.EventKind(8)
)
