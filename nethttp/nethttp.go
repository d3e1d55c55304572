package nethttp

import (
	"net/http"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfunc"
)

// Option configures the middleware.
type Option func(*config)

type config struct {
	guard []core.GuardOption
	deny  func(w http.ResponseWriter, r *http.Request, v *core.Verdict)
	route func(r *http.Request) string
}

// WithKey sets the key function; keyfunc.ClientIP() by default.
func WithKey(f keyfunc.Func) Option { return guard(core.WithKey(f)) }

// WithSkip sets a predicate for requests that are not limited; none by
// default.
func WithSkip(f func(keyfunc.Request) bool) Option { return guard(core.WithSkip(f)) }

// WithCost sets the units a request costs; 1 by default. See [core.WithCost].
func WithCost(f func(keyfunc.Request) int64) Option { return guard(core.WithCost(f)) }

// WithCountIf counts a request only when count(status) is true for the
// handler's status; every admitted request counts by default. See
// [core.WithCountIf].
func WithCountIf(count func(status int) bool) Option { return guard(core.WithCountIf(count)) }

// WithResetIf resets the key when reset(status) is true for the handler's
// status; off by default. See [core.WithResetIf].
func WithResetIf(reset func(status int) bool) Option { return guard(core.WithResetIf(reset)) }

// WithAlso adds a limit decided together with this one: l keyed by key.
// The request is admitted only if every limit admits it, and a request
// denied by one consumes nothing from the others, even when their keys
// live in different Redis Cluster slots. A denial is answered with the
// denying limit's headers and body. See [core.WithAlso]; it panics if l or
// key is nil, a programmer error caught at start-up.
func WithAlso(l *core.Limiter, key keyfunc.Func) Option { return guard(core.WithAlso(l, key)) }

// WithHeaders selects the rate-limit header fields;
// [core.HeadersXRateLimit] by default.
func WithHeaders(s core.HeaderStyle) Option { return guard(core.WithHeaders(s)) }

// WithBody selects the denial body; [core.BodyText] by default.
func WithBody(s core.BodyStyle) Option { return guard(core.WithBody(s)) }

// WithNoKey says what to do with requests that have no key;
// [core.NoKeySkip] by default.
func WithNoKey(a core.NoKeyAction) Option { return guard(core.WithNoKey(a)) }

// WithKeyError says what to do when the key function fails;
// [core.KeyErrorReject] (400) by default.
func WithKeyError(a core.KeyErrorAction) Option { return guard(core.WithKeyError(a)) }

// WithDryRun decides and reports but never blocks; off by default.
func WithDryRun(on bool) Option { return guard(core.WithDryRun(on)) }

// WithObserver adds an observer of every request the middleware handles.
func WithObserver(o core.Observer) Option { return guard(core.WithGuardObserver(o)) }

// WithDenyHandler replaces the 429 answer. The rate-limit headers and
// Retry-After are already set on w when h is called. By default the
// answer is the guard's fixed body.
func WithDenyHandler(h func(w http.ResponseWriter, r *http.Request, v *core.Verdict)) Option {
	return func(c *config) { c.deny = h }
}

// WithRoute sets how the route of a request is named for key functions
// (keyfunc.Route); by default it is the ServeMux pattern that matched
// (r.Pattern), else the path.
func WithRoute(f func(r *http.Request) string) Option {
	return func(c *config) { c.route = f }
}

func guard(o core.GuardOption) Option {
	return func(c *config) { c.guard = append(c.guard, o) }
}

// New returns middleware that limits requests with l. The middleware is
// safe for concurrent use; build it once and wrap as many handlers as
// needed. New panics if l is nil, a programmer error caught at start-up.
func New(l *core.Limiter, opts ...Option) func(http.Handler) http.Handler {
	var c config
	for _, opt := range opts {
		opt(&c)
	}
	g := core.NewGuard(l, c.guard...)
	finish := g.NeedsFinish()
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			route := r.Pattern
			if c.route != nil {
				route = c.route(r)
			}
			ctx := r.Context()
			v := g.Check(ctx, keyfunc.FromHTTP(r, route))
			h := w.Header()
			v.WriteHeaders(h.Set)
			if !v.Proceed() {
				// A copy, so that the allowed path keeps v on the stack.
				vv := v
				if c.deny != nil && vv.Outcome == core.OutcomeDeny {
					c.deny(w, r, &vv)
					return
				}
				Write(w, &vv)
				return
			}
			if !finish {
				next.ServeHTTP(w, r)
				return
			}
			sw := &statusWriter{ResponseWriter: w}
			next.ServeHTTP(sw, r)
			v.Finish(ctx, sw.Status())
		})
	}
}

// Write writes the guard's answer for a request that does not proceed:
// status, content type and fixed body. Headers from v.WriteHeaders must be
// set before. Deny handlers may call it to fall back to the default answer.
func Write(w http.ResponseWriter, v *core.Verdict) {
	status, body := v.Answer(w.Header().Set)
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// statusWriter records the status the handler answered. It unwraps for
// http.ResponseController, so Flush, Hijack and deadlines keep working.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush sends buffered data to the client, for handlers that assert
// http.Flusher.
func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap returns the wrapped writer, for http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Status is the status the handler answered; 200 if it wrote nothing.
func (w *statusWriter) Status() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}
