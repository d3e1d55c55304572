package opshttp

import (
	"encoding/json"
	"log/slog"
	"net/http"

	"github.com/ratekit/ratekit/core"
)

// Option configures the handler.
type Option func(*config)

type config struct {
	logger *slog.Logger
}

// WithLogger logs failed store calls (with the policy, never the key) and
// successful resets to logger. Nothing is logged by default.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.logger = l }
}

// Handler returns the admin handler for limiters, each known by its
// policy name; see the package documentation for its routes. It is safe
// for concurrent use. Handler panics if a limiter is nil or two limiters
// have the same policy name, programmer errors caught at start-up.
func Handler(limiters []*core.Limiter, opts ...Option) http.Handler {
	var c config
	for _, opt := range opts {
		opt(&c)
	}
	h := &handler{cfg: c, byName: map[string]*core.Limiter{}}
	for _, l := range limiters {
		if l == nil {
			panic("opshttp: Handler: nil *core.Limiter")
		}
		name := l.Policy().Name
		if _, dup := h.byName[name]; dup {
			panic("opshttp: Handler: two limiters for policy " + name)
		}
		h.byName[name] = l
		h.order = append(h.order, name)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /policies", h.list)
	mux.HandleFunc("GET /policies/{name}", h.policy)
	mux.HandleFunc("GET /policies/{name}/keys/{key}", h.peek)
	mux.HandleFunc("DELETE /policies/{name}/keys/{key}", h.reset)
	return mux
}

type handler struct {
	cfg    config
	byName map[string]*core.Limiter
	order  []string
}

// Policy is the JSON form of a [core.Policy].
type Policy struct {
	Name      string `json:"name"`
	Algorithm string `json:"algorithm"`
	// Buckets is set under SlidingBuckets.
	Buckets int    `json:"buckets,omitempty"`
	Rules   []Rule `json:"rules"`
}

// Rule is the JSON form of a [core.Rule].
type Rule struct {
	Limit int64 `json:"limit"`
	// Window is in Go duration syntax ("15m0s").
	Window string `json:"window"`
	// WindowSeconds is the window in seconds.
	WindowSeconds float64 `json:"window_seconds"`
}

// KeyState is the answer of a peek: what a request of one unit for the
// key would get now.
type KeyState struct {
	Policy string `json:"policy"`
	// Allowed reports whether a request of one unit would be admitted now.
	Allowed bool `json:"allowed"`
	// Limit, Window and Remaining describe the binding rule.
	Limit     int64  `json:"limit"`
	Window    string `json:"window"`
	Remaining int64  `json:"remaining"`
	// RetryAfterSeconds is when such a request could first succeed; 0 when
	// allowed.
	RetryAfterSeconds float64 `json:"retry_after_seconds"`
	// ResetAfterSeconds is when the binding rule's window is empty again.
	ResetAfterSeconds float64 `json:"reset_after_seconds"`
	// Source says who answered: "store", or a fallback ("local", "open",
	// "closed") when the store failed, in which case the answer is not the
	// shared state.
	Source string `json:"source"`
	// Rules holds every rule's state, in policy order.
	Rules []RuleState `json:"rules,omitempty"`
}

// RuleState is the JSON form of a [core.RuleState].
type RuleState struct {
	Limit             int64   `json:"limit"`
	Window            string  `json:"window"`
	Used              int64   `json:"used"`
	Remaining         int64   `json:"remaining"`
	RetryAfterSeconds float64 `json:"retry_after_seconds"`
	ResetAfterSeconds float64 `json:"reset_after_seconds"`
}

// NewRuleState returns the JSON form of s.
func NewRuleState(s core.RuleState) RuleState {
	return RuleState{
		Limit: s.Limit, Window: s.Window.String(), Used: s.Used, Remaining: s.Remaining(),
		RetryAfterSeconds: s.RetryAfter.Seconds(), ResetAfterSeconds: s.ResetAfter.Seconds(),
	}
}

// Error is the JSON body of a failed request; its text is fixed.
type Error struct {
	Error string `json:"error"`
}

func policyJSON(p core.Policy) Policy {
	out := Policy{Name: p.Name, Algorithm: p.Algorithm.String()}
	if p.Algorithm == core.SlidingBuckets {
		out.Buckets = p.Buckets
		if out.Buckets == 0 {
			out.Buckets = 60 // the default of core.Policy.Buckets
		}
	}
	for _, r := range p.Rules {
		out.Rules = append(out.Rules, Rule{Limit: r.Limit, Window: r.Window.String(), WindowSeconds: r.Window.Seconds()})
	}
	return out
}

func (h *handler) list(w http.ResponseWriter, _ *http.Request) {
	out := make([]Policy, 0, len(h.order))
	for _, name := range h.order {
		out = append(out, policyJSON(h.byName[name].Policy()))
	}
	writeJSON(w, http.StatusOK, out)
}

// limiter returns the limiter of the {name} path segment, or answers 404.
func (h *handler) limiter(w http.ResponseWriter, r *http.Request) (*core.Limiter, bool) {
	l, ok := h.byName[r.PathValue("name")]
	if !ok {
		writeJSON(w, http.StatusNotFound, Error{"unknown policy"})
	}
	return l, ok
}

func (h *handler) policy(w http.ResponseWriter, r *http.Request) {
	if l, ok := h.limiter(w, r); ok {
		writeJSON(w, http.StatusOK, policyJSON(l.Policy()))
	}
}

func (h *handler) peek(w http.ResponseWriter, r *http.Request) {
	l, ok := h.limiter(w, r)
	if !ok {
		return
	}
	key := r.PathValue("key")
	if key == "" {
		writeJSON(w, http.StatusBadRequest, Error{"empty key"})
		return
	}
	d, err := l.Peek(r.Context(), key)
	if err != nil {
		h.log(r, slog.LevelWarn, "opshttp: peek failed", l, err)
		writeJSON(w, http.StatusServiceUnavailable, Error{"peek failed"})
		return
	}
	out := KeyState{
		Policy:            l.Policy().Name,
		Allowed:           d.Allowed,
		Limit:             d.Limit,
		Window:            d.Window.String(),
		Remaining:         d.Remaining,
		RetryAfterSeconds: d.RetryAfter.Seconds(),
		ResetAfterSeconds: d.ResetAfter.Seconds(),
		Source:            d.Source.String(),
	}
	for _, s := range d.Rules() {
		out.Rules = append(out.Rules, NewRuleState(s))
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *handler) reset(w http.ResponseWriter, r *http.Request) {
	l, ok := h.limiter(w, r)
	if !ok {
		return
	}
	key := r.PathValue("key")
	if key == "" {
		writeJSON(w, http.StatusBadRequest, Error{"empty key"})
		return
	}
	if err := l.Reset(r.Context(), key); err != nil {
		h.log(r, slog.LevelWarn, "opshttp: reset failed", l, err)
		writeJSON(w, http.StatusServiceUnavailable, Error{"store unavailable"})
		return
	}
	h.log(r, slog.LevelInfo, "opshttp: key reset", l, nil)
	w.WriteHeader(http.StatusNoContent)
}

func (h *handler) log(r *http.Request, level slog.Level, msg string, l *core.Limiter, err error) {
	if h.cfg.logger == nil {
		return
	}
	attrs := []slog.Attr{slog.String("policy", l.Policy().Name)}
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	h.cfg.logger.LogAttrs(r.Context(), level, msg, attrs...)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
