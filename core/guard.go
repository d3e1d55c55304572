package core

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ratekit/ratekit/keyfunc"
)

// HeaderStyle selects which rate-limit header fields a [Guard] writes. The
// styles combine with |.
type HeaderStyle uint8

const (
	// HeadersXRateLimit writes X-RateLimit-Limit, X-RateLimit-Remaining
	// and X-RateLimit-Reset (delta-seconds until the binding rule's window
	// is empty). It is the default.
	HeadersXRateLimit HeaderStyle = 1 << iota
	// HeadersIETF writes the IETF draft-10 structured fields
	// RateLimit-Policy and RateLimit, one item per rule, each with a
	// hashed partition key (pk).
	HeadersIETF
	// HeadersNone writes no rate-limit header fields (Retry-After is still
	// sent on denials).
	HeadersNone HeaderStyle = 0
)

// BodyStyle selects the body of a denial.
type BodyStyle uint8

const (
	// BodyText is a short text/plain reason. It is the default.
	BodyText BodyStyle = iota
	// BodyProblem is an RFC 9457 application/problem+json document of the
	// IETF "quota-exceeded" problem type naming the violated policy.
	BodyProblem
)

// NoKeyAction says what a [Guard] does when the key function returns
// [keyfunc.ErrNoKey].
type NoKeyAction uint8

const (
	// NoKeySkip lets the request through unlimited. It is the default:
	// pair it with another limiter that covers anonymous requests.
	NoKeySkip NoKeyAction = iota
	// NoKeyShared counts every keyless request under one shared key.
	NoKeyShared
	// NoKeyReject answers 400 Bad Request.
	NoKeyReject
)

// KeyErrorAction says what a [Guard] does when the key function fails with
// an error other than [keyfunc.ErrNoKey].
type KeyErrorAction uint8

const (
	// KeyErrorReject answers 400 Bad Request (gRPC: InvalidArgument). It
	// is the default.
	KeyErrorReject KeyErrorAction = iota
	// KeyErrorSkip lets the request through unlimited.
	KeyErrorSkip
)

// SharedKey is the key under which [NoKeyShared] counts keyless requests.
const SharedKey = "-"

// GuardOption configures a [Guard]. Every adapter forwards its neutral
// options to these.
type GuardOption func(*guardConfig)

type guardConfig struct {
	key      keyfunc.Func
	skip     func(keyfunc.Request) bool
	cost     func(keyfunc.Request) int64
	countIf  func(status int) bool
	resetIf  func(status int) bool
	headers  HeaderStyle
	body     BodyStyle
	noKey    NoKeyAction
	keyErr   KeyErrorAction
	dryRun   bool
	observer Observer
	also     []also
}

// WithKey sets the key function; keyfunc.ClientIP() (peer address, no
// trusted proxies) by default. Behind a proxy the default puts every client
// in one bucket: configure trusted proxies.
func WithKey(f keyfunc.Func) GuardOption {
	return func(c *guardConfig) {
		if f != nil {
			c.key = f
		}
	}
}

// WithSkip sets a predicate for requests that are not limited at all, such
// as health checks or internal callers. None by default.
func WithSkip(f func(keyfunc.Request) bool) GuardOption {
	return func(c *guardConfig) { c.skip = f }
}

// WithCost sets the units a request costs; 1 by default. A cost below 1
// makes the request free (not limited); a cost above the smallest limit of
// the policy is charged as that limit.
func WithCost(f func(keyfunc.Request) int64) GuardOption {
	return func(c *guardConfig) { c.cost = f }
}

// WithCountIf counts a request only when count(status) is true for the
// status the handler answered: the unit is reserved before the handler, so
// concurrent requests cannot overshoot, and refunded afterwards otherwise.
// Login anti-bruteforce counts failures only:
//
//	WithCountIf(func(status int) bool { return status == 401 || status == 403 })
//
// By default every admitted request counts.
func WithCountIf(count func(status int) bool) GuardOption {
	return func(c *guardConfig) { c.countIf = count }
}

// WithResetIf resets the key after the handler answered a status for which
// reset(status) is true, for example clearing an account's failure count
// after a successful login. Only the guard's own key is reset: limits
// added with [WithAlso] keep their units, unless [WithCountIf] refunds
// them. Off by default.
func WithResetIf(reset func(status int) bool) GuardOption {
	return func(c *guardConfig) { c.resetIf = reset }
}

// WithAlso adds a limit decided together with the guard's own: the
// request is admitted only if every limit admits it, and a denial by one
// refunds the units the others took, so a denied request consumes nothing
// (SMS: per phone AND per IP AND a global cap). The limits are decided in
// order, each in its own store call, so they may live in different Redis
// Cluster slots. A request with no key for an added limit is not limited
// by it.
func WithAlso(l *Limiter, key keyfunc.Func) GuardOption {
	if l == nil || key == nil {
		panic("ratekit: WithAlso: nil limiter or key function")
	}
	return func(c *guardConfig) { c.also = append(c.also, also{l: l, key: key}) }
}

type also struct {
	l   *Limiter
	key keyfunc.Func
}

// WithHeaders selects the rate-limit header fields; [HeadersXRateLimit] by
// default. Combine styles with |, or pass [HeadersNone].
func WithHeaders(s HeaderStyle) GuardOption {
	return func(c *guardConfig) { c.headers = s }
}

// WithBody selects the denial body; [BodyText] by default.
func WithBody(s BodyStyle) GuardOption {
	return func(c *guardConfig) { c.body = s }
}

// WithNoKey says what to do with requests that have no key; [NoKeySkip] by
// default.
func WithNoKey(a NoKeyAction) GuardOption {
	return func(c *guardConfig) { c.noKey = a }
}

// WithKeyError says what to do when the key function fails;
// [KeyErrorReject] (400) by default.
func WithKeyError(a KeyErrorAction) GuardOption {
	return func(c *guardConfig) { c.keyErr = a }
}

// WithDryRun makes the guard decide and report but never block: denials
// reach the observers with DryRun set and the request goes on, with no
// rate-limit headers. Use it to tune limits safely in production. Off by
// default.
func WithDryRun(on bool) GuardOption {
	return func(c *guardConfig) { c.dryRun = on }
}

// WithGuardObserver adds an observer that sees every request the guard
// handles: decisions (including dry-run denials), skips, key errors and
// store failures. Several observers are called in order.
func WithGuardObserver(obs Observer) GuardOption {
	return func(c *guardConfig) { c.observer = join(c.observer, obs) }
}

// Guard is the framework-neutral request pipeline every adapter shares:
// skip check, key, cost, decision, and what the answer means (status,
// headers, body). Adapters translate a native request into a
// [keyfunc.Request], call [Guard.Check], and write the [Verdict] the
// framework's way. A Guard is safe for concurrent use.
type Guard struct {
	l         *Limiter
	cfg       guardConfig
	decisions Observer // the guard's observers, as the limiter reports decisions to them
}

// dryRunMark reports the denials of a dry-run guard with DryRun set: the
// request goes on, so observers must not count them as plain denials.
type dryRunMark struct{ o Observer }

func (m dryRunMark) Observe(ctx context.Context, e Event) {
	if e.Kind == EventDecision && !e.Decision.Allowed {
		e.DryRun = true
	}
	m.o.Observe(ctx, e)
}

// NewGuard returns a guard for l. It panics if l is nil, a programmer error
// caught at start-up.
func NewGuard(l *Limiter, opts ...GuardOption) *Guard {
	if l == nil {
		panic("ratekit: nil *core.Limiter")
	}
	g := &Guard{l: l, cfg: guardConfig{key: keyfunc.ClientIP(), headers: HeadersXRateLimit}}
	for _, opt := range opts {
		opt(&g.cfg)
	}
	g.decisions = g.cfg.observer
	if g.cfg.dryRun && g.decisions != nil {
		g.decisions = dryRunMark{g.decisions}
	}
	return g
}

// Limiter returns the guard's limiter.
func (g *Guard) Limiter() *Limiter { return g.l }

// Outcome classifies a [Verdict].
type Outcome uint8

const (
	// OutcomeAllow means decided and admitted; the request goes on.
	OutcomeAllow Outcome = iota
	// OutcomeSkip means not limited (skip predicate, no key, free cost); the
	// request goes on.
	OutcomeSkip
	// OutcomeDeny means over the limit: 429 (gRPC: ResourceExhausted).
	OutcomeDeny
	// OutcomeBadKey means the key source is malformed: 400 (gRPC:
	// InvalidArgument).
	OutcomeBadKey
	// OutcomeUnavailable means the store failed under FailClosed, or the
	// request's context ended before a decision; 503 (gRPC: Unavailable).
	OutcomeUnavailable
)

// String returns the outcome's name.
func (o Outcome) String() string {
	switch o {
	case OutcomeAllow:
		return "allow"
	case OutcomeSkip:
		return "skip"
	case OutcomeDeny:
		return "deny"
	case OutcomeBadKey:
		return "bad_key"
	case OutcomeUnavailable:
		return "unavailable"
	}
	return "unknown"
}

// Verdict is what a [Guard] decided about one request and how to answer
// it. Adapters write it with [Verdict.WriteHeaders], [Verdict.Status] and
// [Verdict.Body], and call [Verdict.Finish] after the handler.
type Verdict struct {
	// Outcome classifies the verdict.
	Outcome Outcome
	// Decision is the limiter's decision, for OutcomeAllow and OutcomeDeny
	// (and dry-run denials, which are OutcomeAllow with DryRun set).
	Decision Decision
	// Key is the key decided on; empty when there was none.
	Key string
	// Cost is the units charged.
	Cost int64
	// DryRun reports a denial let through by dry-run mode.
	DryRun bool
	// Err says why, for OutcomeBadKey and OutcomeUnavailable. Never send
	// it to the client.
	Err error

	g *Guard
	l *Limiter // the limiter whose decision the answer shows
	// Admissions to refund or finish: held0, then more (limits added
	// with WithAlso), so the common single admission allocates nothing.
	held0 held
	nheld int
	more  []held
}

// held is one admission of a request.
type held struct {
	l   *Limiter
	key string
	d   Decision
}

// Check runs the pipeline for r. It never panics on a malformed request and
// never returns a store error: a store failure is resolved by the limiter's
// failure policy.
func (g *Guard) Check(ctx context.Context, r keyfunc.Request) Verdict {
	v := Verdict{g: g, l: g.l}
	if g.cfg.skip != nil && g.cfg.skip(r) {
		v.Outcome = OutcomeSkip
		g.emit(ctx, g.l, Event{Kind: EventSkip})
		return v
	}
	key, ok := g.key(ctx, g.l, g.cfg.key, r, &v)
	if !ok {
		return v
	}
	v.Key = key
	v.Cost = 1
	if g.cfg.cost != nil {
		v.Cost = g.cfg.cost(r)
		if v.Cost < 1 {
			v.Outcome = OutcomeSkip
			g.emit(ctx, g.l, Event{Kind: EventSkip, Key: key})
			return v
		}
	}
	d, err := g.l.allow(ctx, key, v.Cost, g.decisions, true)
	if !g.settle(ctx, &v, g.l, key, d, err) {
		return v
	}
	// Further limits decided together: admitted only if every one admits;
	// a denial refunds what the others took.
	for _, a := range g.cfg.also {
		akey, ok := g.key(ctx, a.l, a.key, r, &v)
		if !ok {
			if v.Outcome == OutcomeSkip {
				v.Outcome = OutcomeAllow // no key for this limit only
				continue
			}
			v.refundAll(ctx)
			return v
		}
		d, err := a.l.allow(ctx, akey, v.Cost, g.decisions, true)
		if !g.settle(ctx, &v, a.l, akey, d, err) {
			return v
		}
	}
	return v
}

// key runs a key function; it reports false when the verdict is final
// (skip or bad key), with v set accordingly.
func (g *Guard) key(ctx context.Context, l *Limiter, f keyfunc.Func, r keyfunc.Request, v *Verdict) (string, bool) {
	key, err := f(r)
	switch {
	case err == nil:
		return key, true
	case errors.Is(err, keyfunc.ErrNoKey):
		switch g.cfg.noKey {
		case NoKeyShared:
			return SharedKey, true
		case NoKeyReject:
			v.Outcome, v.Err = OutcomeBadKey, err
			g.emit(ctx, l, Event{Kind: EventKeyError, Err: err})
			return "", false
		}
		v.Outcome = OutcomeSkip
		g.emit(ctx, l, Event{Kind: EventSkip, Err: err})
		return "", false
	}
	g.emit(ctx, l, Event{Kind: EventKeyError, Err: err})
	if g.cfg.keyErr == KeyErrorSkip {
		v.Outcome = OutcomeSkip
		return "", false
	}
	v.Outcome, v.Err = OutcomeBadKey, err
	return "", false
}

// settle folds one decision into v and reports whether the pipeline goes
// on. An admission is held for Finish; a denial refunds what earlier
// limits of the request took.
func (g *Guard) settle(ctx context.Context, v *Verdict, l *Limiter, key string, d Decision, err error) bool {
	if err != nil {
		v.refundAll(ctx)
		v.Outcome, v.Err = OutcomeUnavailable, err
		return false
	}
	switch {
	case d.Allowed:
		if v.nheld == 0 && !v.DryRun {
			// The first decision is the one the headers show.
			v.Decision, v.l = d, l
		}
		v.hold(held{l: l, key: key, d: d})
		v.Outcome = OutcomeAllow
		return true
	case g.cfg.dryRun:
		// The observers saw the denial with DryRun set (see dryRunMark).
		if !v.DryRun {
			v.Decision, v.l, v.Key = d, l, key
		}
		v.Outcome, v.DryRun = OutcomeAllow, true
		return true
	}
	v.refundAll(ctx)
	v.Decision, v.l, v.Key = d, l, key
	if d.Source == SourceClosed {
		v.Outcome, v.Err = OutcomeUnavailable, errors.New("ratekit: store unavailable (FailClosed)")
	} else {
		v.Outcome = OutcomeDeny
	}
	return false
}

// hold keeps an admission for Finish or a later refund.
func (v *Verdict) hold(h held) {
	if v.nheld == 0 {
		v.held0 = h
	} else {
		v.more = append(v.more, h)
	}
	v.nheld++
}

// dropFirst forgets the first admission held.
func (v *Verdict) dropFirst() {
	if len(v.more) > 0 {
		v.held0, v.more = v.more[0], v.more[1:]
	}
	v.nheld--
}

// refundAll gives back every unit the request's admissions took.
func (v *Verdict) refundAll(ctx context.Context) {
	for v.nheld > 0 {
		h := v.held0
		if err := h.l.Refund(context.WithoutCancel(ctx), h.d); err != nil {
			v.g.emit(ctx, h.l, Event{Kind: EventStoreError, Key: h.key, Err: err})
		}
		v.dropFirst()
	}
}

func (g *Guard) emit(ctx context.Context, l *Limiter, e Event) {
	if g.cfg.observer != nil {
		e.Policy = l.policy.Name
		g.cfg.observer.Observe(ctx, e)
	}
}

// Limiter returns the limiter whose decision the verdict shows: the
// guard's own, or the limit added with [WithAlso] that denied.
func (v *Verdict) Limiter() *Limiter { return v.l }

// ItemName is the name the verdict's binding rule goes by in the IETF
// header fields and problem bodies: the policy name, suffixed with the
// window ("sms-60s") when the policy has several rules.
func (v *Verdict) ItemName() string {
	return itemName(v.l.policy.Name, v.Decision.Window, v.multiRule())
}

// Proceed reports whether the request goes on to the handler.
func (v *Verdict) Proceed() bool {
	return v.Outcome == OutcomeAllow || v.Outcome == OutcomeSkip
}

// Status returns the HTTP status to answer when the request does not
// proceed: 429, 400 or 503; 200 when it proceeds.
func (v *Verdict) Status() int {
	switch v.Outcome {
	case OutcomeDeny:
		return http.StatusTooManyRequests
	case OutcomeBadKey:
		return http.StatusBadRequest
	case OutcomeUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusOK
}

// Header field names written by [Verdict.WriteHeaders], in Go's canonical
// form (field names are case-insensitive: X-Ratelimit-Limit is the
// X-RateLimit-Limit of other libraries), so that http.Header.Set does not
// allocate to canonicalise them.
const (
	HeaderLimit      = "X-Ratelimit-Limit"
	HeaderRemaining  = "X-Ratelimit-Remaining"
	HeaderReset      = "X-Ratelimit-Reset"
	HeaderRetryAfter = "Retry-After"
	HeaderPolicy     = "Ratelimit-Policy"
	HeaderRateLimit  = "Ratelimit"
)

// WriteHeaders calls set for every header field of the answer: the
// rate-limit fields of the selected style on decided requests (allowed or
// denied), and Retry-After on denials and unavailable answers.
func (v *Verdict) WriteHeaders(set func(name, value string)) {
	d := &v.Decision
	decided := v.Outcome == OutcomeAllow && !v.DryRun || v.Outcome == OutcomeDeny
	if decided && d.Source != SourceOpen && d.Source != SourceClosed {
		st := v.g.cfg.headers
		if st&HeadersXRateLimit != 0 {
			set(HeaderLimit, strconv.FormatInt(d.Limit, 10))
			set(HeaderRemaining, strconv.FormatInt(d.Remaining, 10))
			set(HeaderReset, strconv.FormatInt(Seconds(d.ResetAfter), 10))
		}
		if st&HeadersIETF != 0 {
			pol, cur := v.ietf()
			set(HeaderPolicy, pol)
			set(HeaderRateLimit, cur)
		}
	}
	switch v.Outcome {
	case OutcomeDeny:
		set(HeaderRetryAfter, strconv.FormatInt(max(1, Seconds(d.RetryAfter)), 10))
	case OutcomeUnavailable:
		if d.Source == SourceClosed {
			set(HeaderRetryAfter, strconv.FormatInt(max(1, Seconds(d.RetryAfter)), 10))
		}
	}
}

// ietf formats the RateLimit-Policy and RateLimit fields: one item per
// rule, named by the policy (and the window when there are several rules).
// A deny-cache answer knows only its binding rule.
func (v *Verdict) ietf() (policy, current string) {
	d := &v.Decision
	items := d.Rules
	if len(items) == 0 {
		items = []RuleState{{Limit: d.Limit, Window: d.Window, Used: d.Limit - d.Remaining, ResetAfter: d.ResetAfter}}
	}
	multi := v.multiRule()
	pk := partitionKey(v.l.policy.Name, v.Key)
	var pb, cb strings.Builder
	for i, r := range items {
		if i > 0 {
			pb.WriteString(", ")
			cb.WriteString(", ")
		}
		name := strconv.Quote(itemName(v.l.policy.Name, r.Window, multi))
		pb.WriteString(name)
		pb.WriteString(";q=")
		pb.WriteString(strconv.FormatInt(r.Limit, 10))
		pb.WriteString(";w=")
		pb.WriteString(strconv.FormatInt(Seconds(r.Window), 10))
		pb.WriteString(";pk=:")
		pb.WriteString(pk)
		pb.WriteString(":")
		cb.WriteString(name)
		cb.WriteString(";r=")
		cb.WriteString(strconv.FormatInt(r.Remaining(), 10))
		cb.WriteString(";t=")
		cb.WriteString(strconv.FormatInt(Seconds(r.ResetAfter), 10))
		cb.WriteString(";pk=:")
		cb.WriteString(pk)
		cb.WriteString(":")
	}
	return pb.String(), cb.String()
}

// multiRule reports whether the answer's policy has several rules, so
// items are named by window.
func (v *Verdict) multiRule() bool {
	return len(v.l.policy.Rules) > 1 || len(v.Decision.Rules) > 1 || v.l.tiers != nil
}

// itemName names a rule in the IETF fields and problem bodies: the policy
// name, suffixed with the window in seconds when the policy has several
// rules.
func itemName(policy string, window time.Duration, multi bool) string {
	if !multi {
		return policy
	}
	return policy + "-" + strconv.FormatInt(Seconds(window), 10) + "s"
}

// partitionKey hashes the key so the header never reveals it.
func partitionKey(policy, key string) string {
	h := sha256.Sum256([]byte(policy + "\x00" + key))
	return base64.StdEncoding.EncodeToString(h[:9])
}

// Seconds returns d in whole seconds, rounded up.
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// Answer sets the content headers of an answer that does not proceed
// (Content-Type, X-Content-Type-Options: nosniff) through set and returns
// its status and fixed body: what every adapter writes after
// [Verdict.WriteHeaders] when no deny handler takes over.
func (v *Verdict) Answer(set func(name, value string)) (status int, body []byte) {
	ct, body := v.Body()
	set("Content-Type", ct)
	set("X-Content-Type-Options", "nosniff")
	return v.Status(), body
}

// Body returns the content type and body of an answer that does not
// proceed. The texts are fixed: no error detail reaches the client beyond
// the fixed reason of [keyfunc.Reason].
func (v *Verdict) Body() (contentType string, body []byte) {
	switch v.Outcome {
	case OutcomeDeny:
		if v.g.cfg.body == BodyProblem {
			return "application/problem+json", v.problem()
		}
		return "text/plain; charset=utf-8", []byte("rate limit exceeded: retry after " +
			strconv.FormatInt(max(1, Seconds(v.Decision.RetryAfter)), 10) + "s\n")
	case OutcomeBadKey:
		// keyfunc.Reason is a fixed text ("invalid phone number"), never
		// request input.
		if r := keyfunc.Reason(v.Err); r != "" {
			return "text/plain; charset=utf-8", []byte("bad request: " + r + "\n")
		}
		return "text/plain; charset=utf-8", []byte("bad request: missing or malformed rate-limit key\n")
	case OutcomeUnavailable:
		return "text/plain; charset=utf-8", []byte("service unavailable: rate limiter unavailable\n")
	}
	return "", nil
}

// ProblemType is the RFC 9457 problem type of [BodyProblem] denials.
const ProblemType = "https://iana.org/assignments/http-problem-types#quota-exceeded"

func (v *Verdict) problem() []byte {
	retry := max(1, Seconds(v.Decision.RetryAfter))
	var b strings.Builder
	b.WriteString(`{"type":"`)
	b.WriteString(ProblemType)
	b.WriteString(`","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"detail":"retry after `)
	b.WriteString(strconv.FormatInt(retry, 10))
	b.WriteString(`s","violated-policies":[`)
	// Policy names hold no quote, backslash or control character, so
	// strconv.Quote yields valid JSON strings.
	b.WriteString(strconv.Quote(v.ItemName()))
	b.WriteString(`],"retry-after":`)
	b.WriteString(strconv.FormatInt(retry, 10))
	b.WriteString("}\n")
	return []byte(b.String())
}

// Finish completes the verdict after the handler answered status: it
// refunds the reserved units when WithCountIf says the request does not
// count, and resets the key when WithResetIf says so. It does nothing for
// requests that were not admitted by a decision. Store failures here go to
// the observers; the answer is already on its way.
func (v *Verdict) Finish(ctx context.Context, status int) {
	if v.Outcome != OutcomeAllow || v.nheld == 0 {
		return
	}
	// The client may be gone; the refund or reset must still happen.
	ctx = context.WithoutCancel(ctx)
	cfg := &v.g.cfg
	if cfg.resetIf != nil && cfg.resetIf(status) {
		h := v.held0
		if err := h.l.Reset(ctx, h.key); err != nil {
			v.g.emit(ctx, h.l, Event{Kind: EventStoreError, Key: h.key, Err: err})
		}
		// The reset covers the guard's own limit only; limits added with
		// WithAlso are finished by count-if below.
		v.dropFirst()
	}
	if cfg.countIf != nil && !cfg.countIf(status) {
		v.refundAll(ctx)
	}
}

// NeedsFinish reports whether [Verdict.Finish] has work to do, so adapters
// can skip capturing the response status when it has none.
func (g *Guard) NeedsFinish() bool { return g.cfg.countIf != nil || g.cfg.resetIf != nil }

// StatusAuthFailure reports 401 Unauthorized and 403 Forbidden: the
// failures a login limiter counts with [WithCountIf].
func StatusAuthFailure(status int) bool {
	return status == http.StatusUnauthorized || status == http.StatusForbidden
}

// StatusSuccess reports a 2xx status, for [WithResetIf] on a login limiter.
func StatusSuccess(status int) bool { return status >= 200 && status < 300 }
