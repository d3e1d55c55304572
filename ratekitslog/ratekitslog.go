package ratekitslog

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/ratekit/ratekit/core"
)

// DefaultInterval is the interval [New] uses when given one that is not
// positive.
const DefaultInterval = 10 * time.Second

// Messages of the log lines, for handlers that filter on them.
const (
	MsgStoreError   = "ratekit: store call failed; the failure policy decided"
	MsgBreakerOpen  = "ratekit: circuit breaker opened; store calls stop for the cool-down"
	MsgBreakerClose = "ratekit: circuit breaker closed; store calls resume"
	MsgFallback     = "ratekit: store failed; deciding by the failure policy until it answers"
	MsgFallbackEnd  = "ratekit: store answers again; decisions come from it"
)

// Observer logs store failures (warning), breaker openings (error) and
// closings (info), and the start (warning) and end (info) of every
// episode of decisions made by the failure policy, of every limiter or
// guard it is attached to. It is safe
// for concurrent use, and costs nothing on decisions.
type Observer struct {
	logger *slog.Logger
	every  time.Duration
	now    func() time.Time

	mu    sync.Mutex
	state map[stateKey]*window
}

type stateKey struct {
	policy string
	kind   core.EventKind
}

// window is the state of one (policy, kind) line.
type window struct {
	last       time.Time // when the last line was written
	suppressed int64     // events left out since
}

// New returns an observer that writes to logger at most one line per
// interval every for each policy and kind of event (store error, breaker
// open, breaker close). A line reports in "suppressed" how many events of
// its kind were left out since the previous one. A non-positive every
// means [DefaultInterval]. New panics if logger is nil, a programmer error
// caught at start-up.
func New(logger *slog.Logger, every time.Duration) *Observer {
	if logger == nil {
		panic("ratekitslog: New: nil logger")
	}
	if every <= 0 {
		every = DefaultInterval
	}
	return &Observer{logger: logger, every: every, now: time.Now, state: map[stateKey]*window{}}
}

// Observe implements [core.Observer].
func (o *Observer) Observe(ctx context.Context, e core.Event) {
	var (
		level slog.Level
		msg   string
	)
	switch e.Kind {
	case core.EventStoreError:
		level, msg = slog.LevelWarn, MsgStoreError
	case core.EventBreakerOpen:
		level, msg = slog.LevelError, MsgBreakerOpen
	case core.EventBreakerClose:
		level, msg = slog.LevelInfo, MsgBreakerClose
	case core.EventFallbackStart:
		level, msg = slog.LevelWarn, MsgFallback
	case core.EventFallbackEnd:
		level, msg = slog.LevelInfo, MsgFallbackEnd
	default:
		return
	}
	if !o.logger.Enabled(ctx, level) {
		return
	}
	suppressed, ok := o.admit(e.Policy, e.Kind)
	if !ok {
		return
	}
	attrs := make([]slog.Attr, 0, 5)
	attrs = append(attrs, slog.String("policy", e.Policy))
	if e.Err != nil {
		attrs = append(attrs, slog.String("error", e.Err.Error()))
	}
	if e.Latency > 0 {
		attrs = append(attrs, slog.Duration("latency", e.Latency))
	}
	attrs = append(attrs, slog.Int64("suppressed", suppressed))
	if e.Kind == core.EventFallbackEnd {
		attrs = append(attrs, slog.Int64("fallback_decisions", e.Fallbacks))
	}
	if e.Kind == core.EventBreakerClose {
		// Store errors left out during the outage, so that they are not
		// lost when the outage ends.
		attrs = append(attrs, slog.Int64("store_errors_suppressed", o.flush(e.Policy, core.EventStoreError)))
	}
	o.logger.LogAttrs(ctx, level, msg, attrs...)
}

// admit reports whether a line for (policy, kind) may be written now, and
// how many events it left out since the last line.
func (o *Observer) admit(policy string, kind core.EventKind) (int64, bool) {
	now := o.now()
	o.mu.Lock()
	defer o.mu.Unlock()
	k := stateKey{policy, kind}
	w := o.state[k]
	if w == nil {
		w = &window{}
		o.state[k] = w
	} else if now.Sub(w.last) < o.every {
		w.suppressed++
		return 0, false
	}
	n := w.suppressed
	w.last, w.suppressed = now, 0
	return n, true
}

// flush returns and clears the suppressed count of (policy, kind).
func (o *Observer) flush(policy string, kind core.EventKind) int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	w := o.state[stateKey{policy, kind}]
	if w == nil {
		return 0
	}
	n := w.suppressed
	w.suppressed = 0
	return n
}
