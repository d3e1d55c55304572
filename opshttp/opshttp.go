package opshttp

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfunc"
)

// Option configures the handler.
type Option func(*config)

type config struct {
	logger    *slog.Logger
	keyers    []keyer
	authorize func(http.Handler) http.Handler
	observers []core.Observer
	top       func(ctx context.Context, policy string, n int) ([]RefusedKey, error)
}

type keyer struct {
	policy string
	derive func(id string) (string, error)
}

// WithLogger logs failed store calls (with the policy, never the key) and
// successful resets to logger. Nothing is logged by default.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.logger = l }
}

// WithKeyer makes the key routes of policy take an identifier, such as a
// user name or a phone number, rather than the stored key: derive returns
// the key the app's key function stores for the identifier, so it must
// use the same normalisation, secret and options. Support staff have the
// identifier; the store has, for keys made by package keyfunc/personal,
// an HMAC pseudonym of it:
//
//	opshttp.WithKeyer("login-account", func(id string) (string, error) {
//		return personal.AccountKey(id, personal.Secret(secret))
//	})
//
// An identifier that derive refuses is answered 400 with the fixed reason
// of its error ([keyfunc.Reason], such as "invalid phone number"), or
// "invalid identifier" when it has none; the error itself is not shown.
// By default a policy's key routes take the stored key. Handler panics
// if derive is nil, if no limiter has the policy, or if the policy is
// given two keyers.
func WithKeyer(policy string, derive func(id string) (string, error)) Option {
	return func(c *config) { c.keyers = append(c.keyers, keyer{policy, derive}) }
}

// WithAuthorization puts the app's admin check in front of every request:
// authorize wraps the handler as a middleware does, answers a request it
// refuses itself (401 with a challenge, a redirect to the login page, a
// 403) and calls the handler for one it admits. What it puts in the
// request's context reaches the observers of [WithObserver] with each
// change, so that they can say who made it. [Handler] and [NewPage]
// require it: both reset limits, so neither starts open by mistake. Where
// the handler is served only to administrators by other means (a listener
// on a private network), say so with a middleware that admits every
// request, func(h http.Handler) http.Handler { return h }.
func WithAuthorization(authorize func(http.Handler) http.Handler) Option {
	return func(c *config) { c.authorize = authorize }
}

// EventReset is the [core.Event] kind of a reset made through the
// handler or the page, reported to the observers of [WithObserver] once
// it is done: Event.Policy and Event.Key (the stored key) say what was
// reset, and Event.Err is set if the store failed (the key's state in the
// store may then be as it was).
// Its value is one that core's own kinds do not use; observers that do
// not know it, such as package ratekitprom's, ignore it.
const EventReset core.EventKind = 0x80

// WithObserver reports every change made through the handler or the page
// to obs, as a [core.Event] of kind [EventReset], with the context of the
// request that made it. Observers are called in order; none by default.
// The limiters' own observers see the decisions, not the resets.
func WithObserver(obs core.Observer) Option {
	return func(c *config) {
		if obs != nil {
			c.observers = append(c.observers, obs)
		}
	}
}

// Handler returns the admin handler for limiters, each known by its
// policy name, serving every request through the app's admin check
// ([WithAuthorization]); see the package documentation for its routes. It
// is safe for concurrent use. Handler panics without WithAuthorization (or
// if it returns a nil handler), if a limiter is nil, if two limiters have
// the same policy name, or for a [WithKeyer] mistake: programmer errors
// caught at start-up.
func Handler(limiters []*core.Limiter, opts ...Option) http.Handler {
	h, err := newHandler("Handler", limiters, opts)
	if err != nil {
		panic(err.Error())
	}
	served := h.cfg.authorize(h)
	if served == nil {
		panic("ratekit: opshttp: Handler: WithAuthorization returned a nil handler")
	}
	return served
}

// newHandler builds the handler of limiters for the constructor named
// caller, or says which of its arguments is wrong.
func newHandler(caller string, limiters []*core.Limiter, opts []Option) (*handler, error) {
	var c config
	for _, opt := range opts {
		opt(&c)
	}
	h := &handler{cfg: c, byName: map[string]*core.Limiter{}, keyers: map[string]func(string) (string, error){}}
	for _, l := range limiters {
		if l == nil {
			return nil, fmt.Errorf("ratekit: opshttp: %s: nil *core.Limiter", caller)
		}
		name := l.Policy().Name
		if _, dup := h.byName[name]; dup {
			return nil, fmt.Errorf("ratekit: opshttp: %s: two limiters for policy %s", caller, name)
		}
		h.byName[name] = l
		h.order = append(h.order, name)
	}
	for _, k := range c.keyers {
		switch _, known := h.byName[k.policy]; {
		case k.derive == nil:
			return nil, fmt.Errorf("ratekit: opshttp: WithKeyer(%q): nil func", k.policy)
		case !known:
			return nil, fmt.Errorf("ratekit: opshttp: WithKeyer(%q): no limiter has this policy", k.policy)
		case h.keyers[k.policy] != nil:
			return nil, fmt.Errorf("ratekit: opshttp: WithKeyer(%q): two keyers for one policy", k.policy)
		}
		h.keyers[k.policy] = k.derive
	}
	if c.authorize == nil {
		what := "the handler"
		if caller == "NewPage" {
			what = "the page"
		}
		return nil, fmt.Errorf("ratekit: opshttp: %s: no WithAuthorization option: %s resets limits, so it must sit behind the app's admin check", caller, what)
	}
	return h, nil
}

type handler struct {
	cfg    config
	byName map[string]*core.Limiter
	order  []string
	keyers map[string]func(id string) (string, error)
}

// Methods of the routes, for the Allow header of a 405.
const (
	allowRead  = "GET, HEAD"
	allowKey   = "GET, HEAD, DELETE"
	allowGrant = "POST, DELETE"
)

// ServeHTTP routes r. It matches the escaped path segment by segment, so
// that an escaped '/' stays in its segment, and it never redirects: dot
// segments and empty segments are not cleaned away but taken as they
// are, and http.ServeMux's redirects would drop the prefix the handler is
// mounted under.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	seg, ok := segments(r.URL.EscapedPath())
	switch {
	case !ok || len(seg) == 0 || seg[0] != "policies":
		writeJSON(w, http.StatusNotFound, Error{"not found"})
	case len(seg) < 3 || len(seg) == 3 && seg[2] == "refused":
		h.readRoute(w, r, seg)
	case len(seg) == 4 && seg[2] == "keys":
		h.keyRoute(w, r, seg[1], seg[3])
	case len(seg) == 5 && seg[2] == "keys" && seg[4] == "grant":
		h.grantRoute(w, r, seg[1], seg[3])
	default:
		writeJSON(w, http.StatusNotFound, Error{"not found"})
	}
}

// readRoute serves the routes that only read: /policies,
// /policies/{policy} and /policies/{policy}/refused.
func (h *handler) readRoute(w http.ResponseWriter, r *http.Request, seg []string) {
	if !allowed(w, r, allowRead) {
		return
	}
	switch len(seg) {
	case 1:
		h.list(w)
	case 2:
		h.policy(w, seg[1])
	default:
		h.refused(w, r, seg[1])
	}
}

// keyRoute serves /policies/{policy}/keys/{key}: GET peeks, DELETE resets.
func (h *handler) keyRoute(w http.ResponseWriter, r *http.Request, policy, key string) {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		h.peek(w, r, policy, key)
	case http.MethodDelete:
		h.reset(w, r, policy, key)
	default:
		methodNotAllowed(w, allowKey)
	}
}

// grantRoute serves /policies/{policy}/keys/{key}/grant: POST grants,
// DELETE revokes.
func (h *handler) grantRoute(w http.ResponseWriter, r *http.Request, policy, key string) {
	switch r.Method {
	case http.MethodPost:
		h.grant(w, r, policy, key)
	case http.MethodDelete:
		h.revoke(w, r, policy, key)
	default:
		methodNotAllowed(w, allowGrant)
	}
}

// segments splits an escaped path "/a/b%2Fc" into its unescaped segments
// ("a", "b/c"); ok is false when p is not absolute or not validly
// escaped.
func segments(p string) (seg []string, ok bool) {
	rest, ok := strings.CutPrefix(p, "/")
	if !ok {
		return nil, false
	}
	seg = strings.Split(rest, "/")
	for i, s := range seg {
		u, err := url.PathUnescape(s)
		if err != nil {
			return nil, false
		}
		seg[i] = u
	}
	return seg, true
}

// allowed reports whether r's method is GET or HEAD, and answers 405 if
// not.
func allowed(w http.ResponseWriter, r *http.Request, allow string) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	methodNotAllowed(w, allow)
	return false
}

func methodNotAllowed(w http.ResponseWriter, allow string) {
	w.Header().Set("Allow", allow)
	writeJSON(w, http.StatusMethodNotAllowed, Error{"method not allowed"})
}

// Policy is the JSON form of a [core.Policy].
type Policy struct {
	Name      string `json:"name"`
	Algorithm string `json:"algorithm"`
	// Buckets is set under SlidingBuckets.
	Buckets int    `json:"buckets,omitempty"`
	Rules   []Rule `json:"rules"`
	// Identifier reports that the policy's key routes take an identifier,
	// from which the handler derives the stored key ([WithKeyer]), rather
	// than the stored key itself.
	Identifier bool `json:"identifier,omitempty"`
}

// Rule is the JSON form of a [core.Rule].
type Rule struct {
	Limit int64 `json:"limit"`
	// Window is in Go duration syntax ("15m0s"); "0s" for a calendar
	// rule.
	Window string `json:"window"`
	// WindowSeconds is the window in seconds.
	WindowSeconds float64 `json:"window_seconds"`
	// Calendar is a calendar rule's period: "day", "week" or "month".
	Calendar string `json:"calendar,omitempty"`
	// Location is a calendar rule's time zone ("Europe/Paris"; "UTC"
	// when the rule has none).
	Location string `json:"location,omitempty"`
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
	// Locked reports that the key is locked out (core.Policy.Lockout);
	// a reset lifts it.
	Locked bool `json:"locked,omitempty"`
	// LockedUntil is, for a key locked out, when it may retry by this
	// server's clock, in RFC 3339 (UTC): the end of the lockout, or later
	// if a rule stays full longer.
	LockedUntil string `json:"locked_until,omitempty"`
	// Challenged reports that a request of one unit would be challenged
	// (core.Rule.Challenge, core.Decision.Challenged): the key must pass
	// the app's challenge, a CAPTCHA or a second factor, which the app
	// records with core.Limiter.Pass; waiting does not lift it, so
	// RetryAfterSeconds is 0. A reset clears the count that led to it.
	Challenged bool `json:"challenged,omitempty"`
	// Listed reports a key the policy's Allow or Deny list decides
	// (core.Policy.Allow, core.Policy.Deny): it takes no grant.
	Listed bool `json:"listed,omitempty"`
	// Grant is the key's live grant (core.Limiter.Grant); absent when
	// it holds none. Limit and the rules' limits include its Extra.
	Grant *GrantState `json:"grant,omitempty"`
	// Rules holds every rule's state, in policy order.
	Rules []RuleState `json:"rules,omitempty"`
}

// RuleState is the JSON form of a [core.RuleState]. For a calendar rule,
// Window is the length of its current period and ResetAfterSeconds runs to
// its end.
type RuleState struct {
	Limit  int64  `json:"limit"`
	Window string `json:"window"`
	// Calendar is a calendar rule's period: "day", "week" or "month".
	Calendar          string  `json:"calendar,omitempty"`
	Used              int64   `json:"used"`
	Remaining         int64   `json:"remaining"`
	RetryAfterSeconds float64 `json:"retry_after_seconds"`
	ResetAfterSeconds float64 `json:"reset_after_seconds"`
}

// NewRuleState returns the JSON form of s.
func NewRuleState(s core.RuleState) RuleState {
	out := RuleState{
		Limit: s.Limit, Window: s.Window.String(), Used: s.Used, Remaining: s.Remaining(),
		RetryAfterSeconds: s.RetryAfter.Seconds(), ResetAfterSeconds: s.ResetAfter.Seconds(),
	}
	if s.Calendar != 0 {
		out.Calendar = s.Calendar.String()
	}
	return out
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
		rule := Rule{Limit: r.Limit, Window: r.Window.String(), WindowSeconds: r.Window.Seconds()}
		if r.Calendar != 0 {
			rule.Calendar, rule.Location = r.Calendar.String(), "UTC"
			if r.Location != nil {
				rule.Location = r.Location.String()
			}
		}
		out.Rules = append(out.Rules, rule)
	}
	return out
}

func (h *handler) list(w http.ResponseWriter) {
	out := make([]Policy, 0, len(h.order))
	for _, name := range h.order {
		out = append(out, h.policyJSON(name))
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *handler) policyJSON(name string) Policy {
	p := policyJSON(h.byName[name].Policy())
	p.Identifier = h.keyers[name] != nil
	return p
}

// limiter returns the limiter of policy name, or answers 404.
func (h *handler) limiter(w http.ResponseWriter, name string) (*core.Limiter, bool) {
	l, ok := h.byName[name]
	if !ok {
		writeJSON(w, http.StatusNotFound, Error{"unknown policy"})
	}
	return l, ok
}

func (h *handler) policy(w http.ResponseWriter, name string) {
	if _, ok := h.limiter(w, name); ok {
		writeJSON(w, http.StatusOK, h.policyJSON(name))
	}
}

// key returns the stored key that the {key} segment seg names under
// policy, or answers 400: seg itself, or the key derived from it when the
// policy has a keyer.
func (h *handler) key(w http.ResponseWriter, policy, seg string) (string, bool) {
	if seg == "" {
		writeJSON(w, http.StatusBadRequest, Error{"empty key"})
		return "", false
	}
	derive := h.keyers[policy]
	if derive == nil {
		return seg, true
	}
	key, err := derive(seg)
	if err != nil || key == "" {
		reason := keyfunc.Reason(err)
		if reason == "" {
			reason = "invalid identifier"
		}
		writeJSON(w, http.StatusBadRequest, Error{reason})
		return "", false
	}
	return key, true
}

// limiterKey returns the limiter of policy and the key that the path
// segment seg names, or writes why not and reports false.
func (h *handler) limiterKey(w http.ResponseWriter, policy, seg string) (*core.Limiter, string, bool) {
	l, ok := h.limiter(w, policy)
	if !ok {
		return nil, "", false
	}
	key, ok := h.key(w, policy, seg)
	return l, key, ok
}

func (h *handler) peek(w http.ResponseWriter, r *http.Request, policy, seg string) {
	l, key, ok := h.limiterKey(w, policy, seg)
	if !ok {
		return
	}
	d, err := l.Peek(r.Context(), key)
	if err != nil {
		h.log(r, slog.LevelWarn, "ratekit: opshttp: peek failed", l, err)
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
		Locked:            d.Locked,
		Challenged:        d.Challenged,
		Listed:            d.Listed,
		Grant:             grantState(d.Grant),
	}
	if d.Locked {
		out.LockedUntil = time.Now().Add(d.RetryAfter).UTC().Format(time.RFC3339)
	}
	for _, s := range d.Rules() {
		out.Rules = append(out.Rules, NewRuleState(s))
	}
	writeJSON(w, http.StatusOK, out)
}

// Refused is the answer of the top route: the keys a policy refused most
// lately, most refused first.
type Refused struct {
	Policy string       `json:"policy"`
	Keys   []RefusedKey `json:"keys"`
}

// maxTop is the most keys the top route returns.
const maxTop = 100

func (h *handler) refused(w http.ResponseWriter, r *http.Request, policy string) {
	l, ok := h.limiter(w, policy)
	if !ok {
		return
	}
	n := topN
	if v := r.URL.Query()["n"]; len(v) > 0 {
		var err error
		if n, err = strconv.Atoi(v[0]); err != nil || len(v) > 1 || n < 1 || n > maxTop {
			writeJSON(w, http.StatusBadRequest, Error{fmt.Sprintf("n must be one number within 1..%d", maxTop)})
			return
		}
	}
	keys, err := h.topRefused(r.Context(), policy, n)
	if err != nil {
		h.log(r, slog.LevelWarn, "ratekit: opshttp: top refused keys failed", l, err)
		writeJSON(w, http.StatusServiceUnavailable, Error{"store unavailable"})
		return
	}
	if keys == nil {
		keys = []RefusedKey{}
	}
	writeJSON(w, http.StatusOK, Refused{Policy: policy, Keys: keys})
}

func (h *handler) reset(w http.ResponseWriter, r *http.Request, policy, seg string) {
	l, key, ok := h.limiterKey(w, policy, seg)
	if !ok {
		return
	}
	if err := h.resetKey(r, l, key); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, Error{"store unavailable"})
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// resetKey resets key under l for request r, and reports the change, done
// or failed, to the logger and the observers.
func (h *handler) resetKey(r *http.Request, l *core.Limiter, key string) error {
	err := l.Reset(r.Context(), key)
	if err != nil {
		h.log(r, slog.LevelWarn, "ratekit: opshttp: reset failed", l, err)
	} else {
		h.log(r, slog.LevelInfo, "ratekit: opshttp: key reset", l, nil)
	}
	for _, o := range h.cfg.observers {
		o.Observe(r.Context(), core.Event{Kind: EventReset, Policy: l.Policy().Name, Key: key, Err: err})
	}
	return err
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
