package guard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"sync"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfunc"
)

// Option configures a [Guard], and so the middleware of every adapter:
// the adapters take these options as they are, plus a few of their own
// built with [Native].
type Option func(*config)

type config struct {
	key      keyfunc.Func
	block    func(keyfunc.Request) bool
	skip     func(keyfunc.Request) bool
	cost     func(keyfunc.Request) int64
	countIf  func(status int) bool
	resetIf  func(status int) bool
	headers  HeaderStyle
	body     BodyStyle
	noKey    NoKeyAction
	keyErr   KeyErrorAction
	dryRun   bool
	observer core.Observer
	also     []limit
	natives  []any

	// Set by WithStore and WithName, for the LimitBy functions only.
	store   core.Store
	name    string
	rateSet bool
}

// WithKey sets the key function; keyfunc.ClientIP() (the peer address, no
// trusted proxies) by default. Behind a proxy the default puts every
// client in one bucket: configure trusted proxies. A nil f keeps the
// default.
func WithKey(f keyfunc.Func) Option {
	return func(c *config) {
		if f != nil {
			c.key = f
		}
	}
}

// WithSkip sets a predicate for requests that are not limited at all, such
// as health checks or internal callers (an allow list of networks:
// keyfunc.InNetworks). None by default.
func WithSkip(f func(keyfunc.Request) bool) Option {
	return func(c *config) { c.skip = f }
}

// WithBlock sets a predicate for requests refused outright, before the
// skip predicate and any decision: 403 Forbidden (gRPC: PermissionDenied),
// no rate-limit headers, reported to the guard's observers as
// [EventBlock]. A deny list of networks is keyfunc.InNetworks; of
// keys, any lookup. None by default; dry-run mode does not let blocked
// requests through.
func WithBlock(f func(keyfunc.Request) bool) Option {
	return func(c *config) { c.block = f }
}

// WithCost sets the units a request costs; 1 by default. A cost below 1 is
// a malformed request (400, gRPC InvalidArgument); a cost above the
// smallest limit of the key's rules could never fit and is denied (429)
// without a Retry-After.
func WithCost(f func(keyfunc.Request) int64) Option {
	return func(c *config) { c.cost = f }
}

// WithCountIf counts a request only when count(status) is true for the
// status the handler answered: the unit is reserved before the handler, so
// concurrent requests cannot overshoot, and refunded afterwards otherwise.
// Login anti-bruteforce counts failures only:
//
//	guard.WithCountIf(guard.StatusAuthFailure)
//
// By default every admitted request counts. How an adapter finds the
// status is in its documentation (gRPC passes the status code). Reserved
// units count until they are refunded: under a policy with a Lockout, a
// request refused because too many are in flight locks the key out.
func WithCountIf(count func(status int) bool) Option {
	return func(c *config) { c.countIf = count }
}

// WithResetIf resets the key after the handler answered a status for which
// reset(status) is true, for example clearing an account's failure count
// after a successful login. Only the guard's own key is reset: limits
// added with [WithAlso] keep their units, unless [WithCountIf] refunds
// them. Off by default.
func WithResetIf(reset func(status int) bool) Option {
	return func(c *config) { c.resetIf = reset }
}

// WithAlso adds a limit decided together with the guard's own: the
// request is admitted only if every limit admits it, and a denial (or a
// challenge) by one refunds the units the others took, so a denied
// request consumes nothing (SMS: per phone AND per IP AND a global cap). The limits are decided in
// order, each in its own store call, so they may live in different Redis
// Cluster slots. A request with no key for one limit is not limited by
// that one; the others still decide. A denial is answered with the
// denying limit's headers and body; an admission shows the guard's own
// limit in the X-RateLimit fields and every limit in the IETF fields. A limit whose policy has a Lockout
// locks out its own key only, when it denies: a request it refuses while
// locked out consumes nothing from the others, and a request another
// limit denies is refunded to it without counting as its offence. WithAlso
// panics if l or key is nil, a programmer error caught at start-up.
func WithAlso(l *core.Limiter, key keyfunc.Func) Option {
	if l == nil || key == nil {
		panic("ratekit: guard.WithAlso: nil limiter or key function")
	}
	lim := newLimit(l, key)
	return func(c *config) { c.also = append(c.also, lim) }
}

// WithHeaders selects the rate-limit header fields; [HeadersXRateLimit] by
// default. Combine styles with |, or pass [HeadersNone].
func WithHeaders(s HeaderStyle) Option {
	return func(c *config) { c.headers = s }
}

// WithBody selects the body of refusals; [BodyText] by default.
func WithBody(s BodyStyle) Option {
	return func(c *config) { c.body = s }
}

// WithNoKey says what to do with requests that have no key; [NoKeySkip] by
// default.
func WithNoKey(a NoKeyAction) Option {
	return func(c *config) { c.noKey = a }
}

// WithKeyError says what to do when the key function fails;
// [KeyErrorReject] (400, or 413 for a body too large) by default.
func WithKeyError(a KeyErrorAction) Option {
	return func(c *config) { c.keyErr = a }
}

// WithDryRun makes the guard decide and report but never block: denials,
// challenges and FailClosed refusals are let through without rate-limit
// headers and reported to the guard's observers as [EventDryRun]. Use it to tune
// limits safely in production. Bad requests are still refused. Off by
// default.
func WithDryRun(on bool) Option {
	return func(c *config) { c.dryRun = on }
}

// WithObserver adds an observer of what only the guard knows: requests let
// through without a decision ([EventSkip]), malformed keys and costs
// ([EventKeyError]) and denials let through in dry-run mode
// ([EventDryRun]). Decisions and store failures are the limiter's to
// report ([core.WithObserver]): give one observer to both to see every
// event once. Several observers are called in order.
func WithObserver(obs core.Observer) Option {
	return func(c *config) {
		switch {
		case obs == nil:
		case c.observer == nil:
			c.observer = obs
		default:
			c.observer = observers{c.observer, obs}
		}
	}
}

// observers calls several observers in order.
type observers []core.Observer

func (o observers) Observe(ctx context.Context, e core.Event) {
	for _, x := range o {
		x.Observe(ctx, e)
	}
}

// Native returns an option that carries an adapter's own setting, such as
// a deny handler typed to its framework. Adapters build their native
// options with it and read them back with [Guard.ReadNatives]; an adapter
// given a setting it does not know panics at construction.
func Native(setting any) Option {
	return func(c *config) { c.natives = append(c.natives, setting) }
}

// Guard is the framework-neutral request pipeline every adapter shares:
// skip, key, cost, the decisions of the guard's limit and those added with
// [WithAlso], refunds, and what the answer means (status, headers, body).
// Adapters wrap their native request in a [keyfunc.Request], call
// [Guard.Admit], write the [Verdict] their framework's way and call
// [Verdict.Finish] after the handler. A Guard is safe for concurrent use.
type Guard struct {
	own     limit
	cfg     config
	release bool // a limit is an InFlight policy: Finish releases its lease
}

// limit is one limiter of a guard with its key function.
type limit struct {
	l         *core.Limiter
	key       keyfunc.Func
	name      string // the policy name
	inFlight  bool   // an InFlight policy: its admissions are leases
	challenge bool   // a rule of the policy has a Challenge
	keys      *keyWatch
	rules     []ruleText // per rule of the policy
}

// ruleText holds the header texts of a rule of a limit's policy that are
// the same in every answer, formatted once rather than per request.
type ruleText struct {
	limit  int64
	window time.Duration
	multi  bool   // the policy has several rules
	q      string // the limit, as X-RateLimit-Limit shows it
	name   string // the quoted item name of the IETF fields
	qw     string // the q and w parameters of its RateLimit-Policy item
}

func newLimit(l *core.Limiter, key keyfunc.Func) limit {
	p := l.Policy()
	lim := limit{l: l, key: key, name: p.Name, inFlight: p.InFlight > 0, keys: new(keyWatch)}
	lim.rules = make([]ruleText, len(p.Rules))
	multi := len(p.Rules) > 1
	for i, r := range p.Rules {
		lim.challenge = lim.challenge || r.Challenge > 0
		lim.rules[i] = ruleText{limit: r.Limit, window: r.Window, multi: multi,
			q:    string(appendInt(nil, r.Limit)),
			name: strconv.Quote(itemName(p.Name, r.Window, 0, multi)),
			qw:   string(appendQW(nil, r.Limit, r.Window))}
	}
	return lim
}

// limitText returns the text of limit as the X-RateLimit-Limit value of
// a decision by rule i: formatted once when it is that rule's limit.
func (lim *limit) limitText(buf []byte, i int, limit int64) []byte {
	if i >= 0 && i < len(lim.rules) && lim.rules[i].limit == limit {
		return append(buf, lim.rules[i].q...)
	}
	return appendInt(buf, limit)
}

// itemText returns the texts of the IETF item of rule state r, the i-th
// of a decision with several rules or not (multi); nil when r is not the
// policy's rule i as it was at construction, or a calendar rule (whose w
// is the length of its current period).
func (lim *limit) itemText(i int, r *core.RuleState, multi bool) *ruleText {
	if r.Calendar != 0 || i >= len(lim.rules) {
		return nil
	}
	if t := &lim.rules[i]; t.limit == r.Limit && t.window == r.Window && t.multi == multi {
		return t
	}
	return nil
}

// New returns a guard for l. It panics if l is nil; if l's policy is an
// InFlight policy and [WithResetIf] is set (a reset would drop the leases
// of the key's other requests in flight); or if [WithStore] or
// [WithName] is given, which configure the limiter the LimitBy functions
// build (l has its store and its policy): programmer errors caught at
// start-up.
func New(l *core.Limiter, opts ...Option) *Guard {
	if l == nil {
		panic("ratekit: guard.New: nil *core.Limiter")
	}
	cfg := newConfig(opts)
	if cfg.rateSet {
		panic("ratekit: guard.New: WithStore and WithName configure the limiter of the LimitBy functions; " +
			"a *core.Limiter has its store and policy already")
	}
	return build(l, cfg)
}

// newConfig returns the defaults with opts applied.
func newConfig(opts []Option) config {
	cfg := config{key: keyfunc.ClientIP(), headers: HeadersXRateLimit}
	for _, opt := range opts {
		opt(&cfg)
	}
	return cfg
}

// build returns the guard of l configured by cfg.
func build(l *core.Limiter, cfg config) *Guard {
	g := &Guard{cfg: cfg}
	g.own = newLimit(l, g.cfg.key)
	if g.own.inFlight && g.cfg.resetIf != nil {
		panic("ratekit: guard.New: WithResetIf on InFlight policy " + g.own.name + ": a reset would drop the leases of other requests in flight")
	}
	g.release = g.own.inFlight
	for i := range g.cfg.also {
		g.release = g.release || g.cfg.also[i].inFlight
	}
	return g
}

// Limiter returns the guard's own limiter.
func (g *Guard) Limiter() *core.Limiter { return g.own.l }

// ReadNatives stores each setting given with [Native] in the target of
// its type: every target is a pointer to one of the adapter's own setting
// types (*T), where a later setting replaces an earlier one, or to a slice
// of one (*[]T), where settings add up in order. It panics, naming
// adapter, on a setting that no target takes: an option of another
// adapter. Adapters call it once, in their constructor.
func (g *Guard) ReadNatives(adapter string, targets ...any) {
	for _, n := range g.cfg.natives {
		nv := reflect.ValueOf(n)
		taken := false
		for _, t := range targets {
			tv := reflect.ValueOf(t).Elem()
			switch {
			case tv.Type() == nv.Type():
				tv.Set(nv)
			case tv.Kind() == reflect.Slice && tv.Type().Elem() == nv.Type():
				tv.Set(reflect.Append(tv, nv))
			default:
				continue
			}
			taken = true
			break
		}
		if !taken {
			panic(fmt.Sprintf("ratekit: %s: option of type %T belongs to another adapter", adapter, n))
		}
	}
}

// NeedsFinish reports whether [Verdict.Finish] has work to do, so that
// adapters can skip capturing the handler's status when it has none: with
// [WithCountIf] or [WithResetIf], or when a limit is an InFlight policy
// (core.Policy.InFlight), whose leases Finish releases.
func (g *Guard) NeedsFinish() bool { return g.cfg.countIf != nil || g.cfg.resetIf != nil || g.release }

// Admit runs the pipeline for r: block, skip, key and cost, then the decision of
// the guard's limit and of every limit added with [WithAlso]. It never
// panics on a malformed request and never returns a store error: a store
// failure is resolved by the limiter's failure policy.
func (g *Guard) Admit(ctx context.Context, r keyfunc.Request) (v Verdict) {
	g.admit(ctx, &v, r)
	return v
}

// admit is Admit writing its verdict to v, a zero Verdict: the verdict
// (hundreds of bytes) is built where the caller returns it, not copied
// there.
func (g *Guard) admit(ctx context.Context, v *Verdict, r keyfunc.Request) {
	v.g, v.by = g, &g.own
	if !g.prelude(ctx, v, r) || !g.decide(ctx, v, &g.own, r) {
		return
	}
	for i := range g.cfg.also {
		if !g.decide(ctx, v, &g.cfg.also[i], r) {
			return
		}
	}
}

// prelude runs what [Guard.Admit] and [Guard.Wait] do before any
// decision: the block and skip predicates, then the cost. It reports
// whether the pipeline goes on, with v.Cost set and v.Outcome
// OutcomeSkip until a limit admits the request.
func (g *Guard) prelude(ctx context.Context, v *Verdict, r keyfunc.Request) bool {
	switch {
	case g.cfg.block != nil && g.cfg.block(r):
		v.Outcome, v.Err = OutcomeBlocked, ErrBlocked
		g.emit(ctx, &g.own, core.Event{Kind: EventBlock})
		return false
	case g.cfg.skip != nil && g.cfg.skip(r):
		v.Outcome = OutcomeSkip
		g.emit(ctx, &g.own, core.Event{Kind: EventSkip})
		return false
	}
	v.Cost = 1
	if g.cfg.cost != nil {
		if v.Cost = g.cfg.cost(r); v.Cost < 1 {
			v.Outcome, v.Err = OutcomeInvalid, errInvalidCost
			g.emit(ctx, &g.own, core.Event{Kind: EventKeyError, Cost: v.Cost, Err: errInvalidCost})
			return false
		}
	}
	v.Outcome = OutcomeSkip
	return true
}

// keyOf returns the key of r for lim, as [WithNoKey] and [WithKeyError]
// say: ok is false when lim does not decide r, because r has no key or a
// malformed one for it; the request is then refused (v.Outcome
// OutcomeInvalid) or goes on without lim.
func (g *Guard) keyOf(ctx context.Context, v *Verdict, lim *limit, r keyfunc.Request) (key string, ok bool) {
	key, err := lim.key(r)
	switch {
	case err == nil:
		lim.keys.found()
		return key, true
	case errors.Is(err, keyfunc.ErrNoKey):
		switch g.cfg.noKey {
		case NoKeyShared:
			return SharedKey, true
		case NoKeyReject:
			g.refuse(ctx, v, lim, OutcomeInvalid, err, EventKeyError)
			return "", false
		}
		lim.keys.missed(ctx, lim.name)
		g.emit(ctx, lim, core.Event{Kind: EventSkip, Err: err})
		return "", false // no key for this limit only
	case g.cfg.keyErr == KeyErrorSkip:
		g.emit(ctx, lim, core.Event{Kind: EventKeyError, Err: err})
		return "", false
	}
	g.refuse(ctx, v, lim, OutcomeInvalid, err, EventKeyError)
	return "", false
}

// ErrBlocked is the error of a verdict refused by the block predicate
// ([WithBlock]); nethttp.Transport and the gRPC client interceptors
// return errors wrapping it.
var ErrBlocked = errors.New("ratekit: request blocked (WithBlock)")

// AdmitHTTP is [Guard.Admit] for an *http.Request, seen by key functions
// as keyfunc.FromHTTPWithValues(r, route, values) shows it, through a
// view taken from a pool and put back before AdmitHTTP returns: the
// net/http, gin and echo adapters' way to build none per request.
func (g *Guard) AdmitHTTP(ctx context.Context, r *http.Request, route string, values keyfunc.Locals) (v Verdict) {
	h := httpViews.Get().(*keyfunc.HTTPRequest)
	h.Reset(r, route, values)
	g.admit(ctx, &v, h)
	h.Reset(nil, "", nil)
	httpViews.Put(h)
	return v
}

var httpViews = sync.Pool{New: func() any { return new(keyfunc.HTTPRequest) }}

// errInvalidCost is the error of a verdict for a cost below 1.
var errInvalidCost = errors.New("ratekit: request cost below 1")

// decide keys r for lim and decides it, folding the result into v; it
// reports whether the pipeline goes on.
func (g *Guard) decide(ctx context.Context, v *Verdict, lim *limit, r keyfunc.Request) bool {
	key, ok := g.keyOf(ctx, v, lim, r)
	if !ok {
		return v.Outcome != OutcomeInvalid
	}
	if v.nheld == 0 && !v.DryRun {
		// The decision the answer shows, whatever it is: made where it is
		// kept rather than copied there.
		return g.decideFirst(ctx, v, lim, key)
	}
	d, err := lim.l.AllowN(ctx, key, v.Cost)
	switch {
	case err != nil:
		g.fail(ctx, v, lim, key, err)
		return false
	case d.Allowed:
		v.admit(lim, key, d)
		return true
	case g.cfg.dryRun:
		g.letThrough(ctx, v, lim, key, d)
		return true
	}
	v.refundAll(ctx)
	g.deny(v, lim, key, d)
	return false
}

// decideFirst is decide for a verdict that holds no decision yet: no
// admission, and no denial let through in dry-run mode.
func (g *Guard) decideFirst(ctx context.Context, v *Verdict, lim *limit, key string) bool {
	var err error
	v.Decision, err = lim.l.AllowN(ctx, key, v.Cost)
	d := &v.Decision
	switch {
	case err != nil:
		g.fail(ctx, v, lim, key, err)
		return false
	case d.Allowed:
		// As v.admit does with the first admission.
		v.Key, v.by = key, lim
		v.nheld++
		v.Outcome = OutcomeAllow
		return true
	case g.cfg.dryRun:
		g.letThrough(ctx, v, lim, key, *d)
		return true
	}
	g.deny(v, lim, key, *d)
	return false
}

// deny ends the pipeline with lim's denial (or challenge) d of key; the
// units of the admissions before are given back already.
func (g *Guard) deny(v *Verdict, lim *limit, key string, d core.Decision) {
	v.Decision, v.Key, v.by = d, key, lim
	switch {
	case d.Source == core.SourceClosed:
		v.Outcome, v.Err = OutcomeUnavailable, errClosed
	case d.Challenged:
		v.Outcome = OutcomeChallenge
	default:
		v.Outcome = OutcomeDeny
	}
}

// fail ends the pipeline for an error of lim's limiter: a cost that can
// never fit (OutcomeDeny, with no decision to show), or a context that
// ended (OutcomeUnavailable). The units taken are given back.
func (g *Guard) fail(ctx context.Context, v *Verdict, lim *limit, key string, err error) {
	v.refundAll(ctx)
	v.Outcome, v.Err, v.Key, v.by = OutcomeUnavailable, err, key, lim
	v.Decision = core.Decision{}
	if errors.Is(err, core.ErrInvalidCost) {
		v.Outcome = OutcomeDeny
	}
}

// letThrough lets a denial by lim through in dry-run mode, reporting it.
func (g *Guard) letThrough(ctx context.Context, v *Verdict, lim *limit, key string, d core.Decision) {
	g.emit(ctx, lim, core.Event{Kind: EventDryRun, Key: key, Cost: v.Cost, Decision: d})
	if v.nheld == 0 && !v.DryRun {
		v.Decision, v.Key, v.by = d, key, lim
	}
	v.Outcome, v.DryRun = OutcomeAllow, true
}

// errClosed is the error of a verdict refused by a FailClosed fallback.
var errClosed = errors.New("ratekit: store unavailable (FailClosed)")

// refuse ends the pipeline with outcome o (a malformed request) for lim,
// reporting kind.
func (g *Guard) refuse(ctx context.Context, v *Verdict, lim *limit, o Outcome, err error, kind core.EventKind) bool {
	g.emit(ctx, lim, core.Event{Kind: kind, Err: err})
	v.refundAll(ctx)
	v.Outcome, v.Err, v.by = o, err, lim
	v.Decision, v.Key = core.Decision{}, ""
	return false
}

func (g *Guard) emit(ctx context.Context, lim *limit, e core.Event) {
	if g.cfg.observer != nil {
		e.Policy = lim.name
		g.cfg.observer.Observe(ctx, e)
	}
}

// StatusAuthFailure reports 401 Unauthorized and 403 Forbidden: the
// failures a login limiter counts with [WithCountIf].
func StatusAuthFailure(status int) bool { return status == 401 || status == 403 }

// StatusSuccess reports a 2xx status, for [WithResetIf] on a login limiter.
func StatusSuccess(status int) bool { return status >= 200 && status < 300 }
