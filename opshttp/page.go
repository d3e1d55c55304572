package opshttp

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed" // the page's template and style sheet
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/driver"
	"github.com/ratekit/ratekit/keyfunc"
)

// Bounds of what the page reads from a request.
const (
	// maxInput is the longest value looked up, in bytes.
	maxInput = 1024
	// maxQuery is the longest query string of a page request, in bytes.
	maxQuery = 4096
	// maxForm is the largest body of a reset, in bytes.
	maxForm = 4096
	// topN is how many of a policy's most refused keys the page shows.
	topN = 10
)

// csrfCookie names the cookie holding the page's form token.
const csrfCookie = "ratekit_ops_csrf"

var (
	//go:embed page.html
	pageHTML string
	//go:embed page.css
	pageCSS string

	pageTmpl = template.Must(template.New("page").Parse(pageHTML))
	// pageCSP allows the page's own style sheet and nothing else: no
	// script, image, frame or font, and forms only to the page itself.
	pageCSP = "default-src 'none'; style-src '" + cssHash(pageCSS) + "'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)

func cssHash(css string) string {
	sum := sha256.Sum256([]byte(css))
	return "sha256-" + base64.StdEncoding.EncodeToString(sum[:])
}

// RefusedKey is one of the keys a policy refused most lately, as
// [core.Limiter.TopRefused] or a source given with [WithTopRefused]
// reports it.
type RefusedKey struct {
	// Key is the key as stored: an address, an AppKey, or a pseudonym
	// for keys made by package keyfunc/personal.
	Key string `json:"key"`
	// Refusals is how many requests of the key the policy refused, as
	// the source counts them.
	Refusals int64 `json:"refusals"`
}

// WithTopRefused replaces the source of each policy's most refused keys:
// top returns at most n of the keys policy refused most lately, most
// refused first. By default the page and the handler ask each policy's
// limiter ([core.Limiter.TopRefused]: the keys refused most in the last
// five minutes, summed over every instance that shares its store). top
// is called on the request path of every page view and top route, with
// the request's context: it must be fast and safe for concurrent use.
func WithTopRefused(top func(ctx context.Context, policy string, n int) ([]RefusedKey, error)) Option {
	return func(c *config) { c.top = top }
}

// topRefused returns at most n of the keys policy refused most, from the
// source of WithTopRefused or else from its limiter.
func (h *handler) topRefused(ctx context.Context, policy string, n int) ([]RefusedKey, error) {
	if h.cfg.top != nil {
		keys, err := h.cfg.top(ctx, policy, n)
		return keys[:min(len(keys), n)], err
	}
	top, err := h.byName[policy].TopRefused(ctx, n)
	if err != nil {
		return nil, err
	}
	keys := make([]RefusedKey, len(top))
	for i, k := range top {
		keys[i] = RefusedKey{Key: k.Key, Refusals: k.Refusals}
	}
	return keys, nil
}

// Page is the operations page: a small server-rendered web page where
// support staff look up a key under every policy and reset it. Create it
// with [NewPage]; it is safe for concurrent use. See the package
// documentation for what it serves.
type Page struct {
	h     *handler
	serve http.Handler // route behind the app's authorization
	cop   *http.CrossOriginProtection
}

// NewPage returns the operations page for limiters, each known by its
// policy name, with the options of [Handler] ([WithKeyer], [WithLogger],
// [WithObserver]) and [WithTopRefused]. Mount it under a prefix stripped
// with [http.StripPrefix], ending in a slash:
//
//	page, err := opshttp.NewPage(limiters, opshttp.WithAuthorization(requireAdmin))
//	mux.Handle("/admin/ops/", http.StripPrefix("/admin/ops", page))
//
// The page changes limits, so it refuses to start without
// [WithAuthorization]: NewPage then returns an error naming it. It also
// returns an error if a limiter is nil, if two limiters have the same
// policy name, or for a [WithKeyer] mistake.
func NewPage(limiters []*core.Limiter, opts ...Option) (*Page, error) {
	h, err := newHandler("NewPage", limiters, opts)
	if err != nil {
		return nil, err
	}
	p := &Page{h: h, cop: http.NewCrossOriginProtection()}
	p.serve = h.cfg.authorize(http.HandlerFunc(p.route))
	if p.serve == nil {
		return nil, errors.New("ratekit: opshttp: NewPage: WithAuthorization returned a nil handler")
	}
	return p, nil
}

// ServeHTTP serves the page through the app's authorization.
func (p *Page) ServeHTTP(w http.ResponseWriter, r *http.Request) { p.serve.ServeHTTP(w, r) }

func (p *Page) route(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			p.fail(w, r, http.StatusMethodNotAllowed, "method not allowed", "GET, HEAD")
			return
		}
		p.view(w, r)
	case "/reset", "/grant":
		if r.Method != http.MethodPost {
			p.fail(w, r, http.StatusMethodNotAllowed, "method not allowed", "POST")
			return
		}
		if r.URL.Path == "/grant" {
			p.grant(w, r)
			return
		}
		p.reset(w, r)
	default:
		p.fail(w, r, http.StatusNotFound, "not found", "")
	}
}

// lookup is what a page request asks for: a value, looked up as an
// identifier (through each policy's keyer) or as a stored key.
type lookup struct {
	q     string
	asKey bool
}

// afterReset returns the query string of l's lookup once policy has been
// reset by the browser whose form token is token: with the proof of the
// reset, without which the page does not say it.
func (l lookup) afterReset(policy, token string) string {
	v := url.Values{"q": {l.q}, "reset": {policy}, "done": {l.resetProof(policy, token)}}
	if l.asKey {
		v.Set("as", "key")
	}
	return v.Encode()
}

// resetProof proves to the page that the browser whose form token is
// token reset policy for l: a MAC under the token, which a link made by
// anyone else cannot carry, so that "?reset=" alone shows no "Reset under".
func (l lookup) resetProof(policy, token string) string {
	m := hmac.New(sha256.New, []byte(token))
	as := "id"
	if l.asKey {
		as = "key"
	}
	m.Write([]byte("ratekit-ops-reset\x00" + policy + "\x00" + as + "\x00" + l.q))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// resetDone returns the policy that the query v says was just reset for
// l, when it carries the proof for the browser's form token; "" otherwise.
func (p *Page) resetDone(r *http.Request, v url.Values, l lookup) string {
	name, token := v.Get("reset"), csrfToken(r)
	if p.h.byName[name] == nil || token == "" ||
		!hmac.Equal([]byte(v.Get("done")), []byte(l.resetProof(name, token))) {
		return ""
	}
	return name
}

// readLookup reads a lookup from form values, or returns the reason it is
// malformed.
func readLookup(v url.Values) (lookup, string) {
	for _, name := range []string{"q", "as", "policy", "reset", "done"} {
		if len(v[name]) > 1 {
			return lookup{}, "repeated field " + name
		}
	}
	l := lookup{q: v.Get("q")}
	switch v.Get("as") {
	case "", "id":
	case "key":
		l.asKey = true
	default:
		return lookup{}, `"as" must be id or key`
	}
	if len(l.q) > maxInput {
		return lookup{}, fmt.Sprintf("value longer than %d bytes", maxInput)
	}
	return l, ""
}

func (p *Page) view(w http.ResponseWriter, r *http.Request) {
	if len(r.URL.RawQuery) > maxQuery {
		p.fail(w, r, http.StatusBadRequest, fmt.Sprintf("query longer than %d bytes", maxQuery), "")
		return
	}
	v, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		p.fail(w, r, http.StatusBadRequest, "malformed query", "")
		return
	}
	l, reason := readLookup(v)
	if reason != "" {
		p.fail(w, r, http.StatusBadRequest, reason, "")
		return
	}
	d := p.data(w, r, l)
	d.Flash = p.resetDone(r, v, l)
	for i := range d.Policies {
		pv := &d.Policies[i]
		pv.Top = p.top(r, pv.Name)
		if l.q != "" {
			pv.Result = p.peek(r, pv.Name, l)
		}
	}
	p.render(w, http.StatusOK, d)
}

// fail renders the page with reason at status; allow is the Allow header
// of a 405.
func (p *Page) fail(w http.ResponseWriter, r *http.Request, status int, reason, allow string) {
	if allow != "" {
		w.Header().Set("Allow", allow)
	}
	d := p.data(w, r, lookup{})
	d.Error = reason
	p.render(w, status, d)
}

// data returns the page's data without results: the policies, and the
// form token, which it sets as a cookie when r has none.
func (p *Page) data(w http.ResponseWriter, r *http.Request, l lookup) *pageData {
	d := &pageData{CSS: template.CSS(pageCSS), Q: l.q, AsKey: l.asKey, Token: csrfToken(r)}
	if d.Token == "" {
		d.Token = rand.Text()
		http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: d.Token, HttpOnly: true,
			Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	}
	for _, name := range p.h.order {
		pol := p.h.byName[name].Policy()
		d.Policies = append(d.Policies, policyView{Name: name, Summary: summary(pol),
			Identifier: p.h.keyers[name] != nil, Lockout: pol.Lockout.For > 0})
	}
	return d
}

// csrfToken returns the well-formed form token of r's cookie, or "".
func csrfToken(r *http.Request) string {
	c, err := r.Cookie(csrfCookie)
	if err != nil || len(c.Value) != 26 || strings.Trim(c.Value, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567") != "" {
		return ""
	}
	return c.Value
}

func (p *Page) render(w http.ResponseWriter, status int, d *pageData) {
	var buf bytes.Buffer
	if err := pageTmpl.Execute(&buf, d); err != nil {
		http.Error(w, "ratekit: opshttp: page failed", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", pageCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// reset serves the reset form: a same-origin POST with the form token of
// the page's cookie.
func (p *Page) reset(w http.ResponseWriter, r *http.Request) {
	f, ok := p.form(w, r)
	if !ok {
		return
	}
	if err := p.h.resetKey(r, f.lim, f.key); err != nil {
		p.fail(w, r, http.StatusServiceUnavailable, "reset failed: the store did not answer", "")
		return
	}
	// Back to the lookup, read afresh (post/redirect/get), relative to
	// the page's own URL whatever prefix it is mounted under.
	w.Header().Set("Location", "./?"+f.l.afterReset(f.name, f.token))
	w.WriteHeader(http.StatusSeeOther)
}

// postedForm is a form of the page, checked: the lookup it was posted
// from, the policy it names and the key the lookup names under it.
type postedForm struct {
	values url.Values
	l      lookup
	name   string
	lim    *core.Limiter
	key    string
	token  string
}

// form reads and checks a form of the page: a same-origin POST with the
// form token of the page's cookie, of a lookup under a known policy. It
// answers the request itself and returns false when the form is not so.
func (p *Page) form(w http.ResponseWriter, r *http.Request) (postedForm, bool) {
	if err := p.cop.Check(r); err != nil {
		p.fail(w, r, http.StatusForbidden, "cross-origin request refused", "")
		return postedForm{}, false
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			p.fail(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("form larger than %d bytes", maxForm), "")
			return postedForm{}, false
		}
		p.fail(w, r, http.StatusBadRequest, "malformed form", "")
		return postedForm{}, false
	}
	form := r.PostForm
	token := csrfToken(r)
	if token == "" || len(form["csrf"]) != 1 || subtle.ConstantTimeCompare([]byte(token), []byte(form.Get("csrf"))) != 1 {
		p.fail(w, r, http.StatusForbidden, "missing or stale form token: reload the page and try again", "")
		return postedForm{}, false
	}
	l, reason := readLookup(form)
	if reason != "" {
		p.fail(w, r, http.StatusBadRequest, reason, "")
		return postedForm{}, false
	}
	name := form.Get("policy")
	lim := p.h.byName[name]
	if lim == nil {
		p.fail(w, r, http.StatusBadRequest, "unknown policy", "")
		return postedForm{}, false
	}
	key, reason := p.key(name, l)
	if reason != "" {
		p.fail(w, r, http.StatusBadRequest, reason, "")
		return postedForm{}, false
	}
	return postedForm{values: form, l: l, name: name, lim: lim, key: key, token: token}, true
}

// key returns the stored key that l names under policy, or the reason it
// names none.
func (p *Page) key(policy string, l lookup) (key, reason string) {
	if l.q == "" {
		return "", "empty key"
	}
	derive := p.h.keyers[policy]
	if l.asKey || derive == nil {
		return l.q, ""
	}
	key, err := derive(l.q)
	if err != nil || key == "" {
		if reason = keyfunc.Reason(err); reason == "" {
			reason = "invalid identifier"
		}
		return "", reason
	}
	return key, ""
}

// peek looks l up under policy.
func (p *Page) peek(r *http.Request, policy string, l lookup) *resultView {
	key, reason := p.key(policy, l)
	if reason != "" {
		return &resultView{Refused: reason}
	}
	lim := p.h.byName[policy]
	out := &resultView{Key: key, Derived: p.h.keyers[policy] != nil && !l.asKey}
	d, err := lim.Peek(r.Context(), key)
	if err != nil {
		p.h.log(r, slog.LevelWarn, "ratekit: opshttp: peek failed", lim, err)
		out.Failed = true
		return out
	}
	now := time.Now()
	pol := lim.Policy()
	out.Allowed, out.Locked, out.Source, out.Fallback = d.Allowed, d.Locked, d.Source.String(), d.Source.Fallback()
	out.Challenged = d.Challenged
	out.Limit, out.Remaining = d.Limit, d.Remaining
	out.InFlight = pol.InFlight > 0
	out.Listed = d.Listed
	if g := d.Grant; g != nil {
		out.Grant = &grantView{Extra: g.Extra, Exempt: g.Exempt, Until: stamp(g.Until, now, time.UTC), By: g.By, Note: g.Note}
	}
	if !d.Allowed && !d.Challenged {
		out.Until = stampAt(now, d.RetryAfter, time.UTC)
	}
	for i, s := range d.Rules() {
		rv := ruleView{Rule: ruleLabel(pol, i, s), Limit: s.Limit, Used: s.Used, Remaining: s.Remaining(),
			Full: s.RetryAfter > 0}
		loc := time.UTC
		if s.Calendar != 0 {
			rv.Calendar = true
			if i < len(pol.Rules) && pol.Rules[i].Calendar == s.Calendar && pol.Rules[i].Location != nil {
				loc = pol.Rules[i].Location
			}
			// A period starts and ends on a whole second.
			end := now.Add(s.ResetAfter).Round(time.Second)
			rv.Start, rv.End = stamp(end.Add(-s.Window), now, loc), stamp(end, now, loc)
		} else if s.Used > 0 {
			rv.End = stampAt(now, s.ResetAfter, loc)
		}
		out.Rules = append(out.Rules, rv)
	}
	return out
}

// top returns the view of policy's most refused keys. Each is shown as
// stored, and linked to its lookup as a stored key, unless the policy's
// keyer derives the key from itself (an account or phone number kept in
// clear): support knows it so, and it is looked up as an identifier,
// under every policy. A pseudonym stays a pseudonym. The hash of a key
// over 128 bytes is shown unlinked: only the key itself finds it.
func (p *Page) top(r *http.Request, policy string) topView {
	keys, err := p.h.topRefused(r.Context(), policy, topN)
	if err != nil {
		p.h.log(r, slog.LevelWarn, "ratekit: opshttp: top refused keys failed", p.h.byName[policy], err)
		return topView{Failed: true}
	}
	var v topView
	derive := p.h.keyers[policy]
	for _, k := range keys {
		kv := topKey{RefusedKey: k, Hashed: k.Key != "" && driver.BoundKey(k.Key) != k.Key && len(k.Key) <= driver.MaxKeyLen}
		if derive != nil && !kv.Hashed {
			d, err := derive(k.Key)
			kv.AsID = err == nil && d == k.Key
		}
		v.Keys = append(v.Keys, kv)
	}
	return v
}

// pageData is what the template renders.
type pageData struct {
	CSS      template.CSS
	Token    string
	Q        string
	AsKey    bool
	Error    string
	Flash    string // the policy just reset
	Policies []policyView
}

type policyView struct {
	Name       string
	Summary    string
	Identifier bool // the policy has a keyer
	Lockout    bool // the policy locks keys out
	Result     *resultView
	Top        topView
}

type resultView struct {
	Key     string // the stored key looked up
	Derived bool   // Key came from the policy's keyer
	Refused string // the keyer's reason for refusing the value
	Failed  bool   // the store did not answer
	Allowed bool
	Locked  bool
	// Challenged: the next request must pass the app's challenge first.
	Challenged bool
	Until      instant // when a refused key may retry
	Source     string
	Fallback   bool
	InFlight   bool
	Limit      int64
	// Remaining is of the binding rule.
	Remaining int64
	Rules     []ruleView
	// Listed: the policy's Allow or Deny list decides the key.
	Listed bool
	// Grant is the key's live grant, nil when none.
	Grant *grantView
}

type ruleView struct {
	Rule                   string
	Limit, Used, Remaining int64
	Full                   bool
	Calendar               bool
	Start, End             instant
}

type topView struct {
	Failed bool // the source failed
	Keys   []topKey
}

type topKey struct {
	RefusedKey
	AsID bool // the policy's keyer derives the key from itself
	// Hashed: the key is the hash of a key over 128 bytes
	// (driver.BoundKey), which no lookup finds: a lookup takes the key
	// itself, and hashes a key of a hash's shape again.
	Hashed bool
}

// instant is a time shown on the page.
type instant struct {
	At   string // RFC 3339, for the datetime attribute
	Text string // in the zone of its rule
	In   string // how long from now
}

// stampAt returns the instant d after now, shown in loc.
func stampAt(now time.Time, d time.Duration, loc *time.Location) instant {
	return stamp(now.Add(d), now, loc)
}

// stamp returns t shown in loc, with how long it is from now.
func stamp(t, now time.Time, loc *time.Location) instant {
	t = t.In(loc)
	return instant{At: t.Format(time.RFC3339), Text: t.Format("2006-01-02 15:04:05 MST"), In: approx(t.Sub(now))}
}

// approx writes d for a reader: "45s", "14m58s", "1h", "2h30m", "3d4h".
func approx(d time.Duration) string {
	d = d.Round(time.Second)
	switch {
	case d >= 48*time.Hour:
		days := d / (24 * time.Hour)
		return fmt.Sprintf("%dd%dh", days, (d-days*24*time.Hour)/time.Hour)
	case d >= time.Hour:
		return short(d.Truncate(time.Minute))
	}
	return short(d)
}

// short writes d without its zero tail: "15m", "1h", "1h30m".
func short(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// ruleLabel describes rule i of a decision under pol: "5 per 15m", or "1000
// per month (Europe/Paris)".
func ruleLabel(pol core.Policy, i int, s core.RuleState) string {
	if s.Calendar == 0 {
		return fmt.Sprintf("%d per %s", s.Limit, short(s.Window))
	}
	loc := "UTC"
	if i < len(pol.Rules) && pol.Rules[i].Calendar == s.Calendar && pol.Rules[i].Location != nil {
		loc = pol.Rules[i].Location.String()
	}
	return fmt.Sprintf("%d per %s (%s)", s.Limit, s.Calendar, loc)
}

// summary describes a policy in one line.
func summary(p core.Policy) string {
	if p.InFlight > 0 {
		return fmt.Sprintf("at most %d in flight", p.InFlight)
	}
	parts := make([]string, 0, len(p.Rules)+2)
	for i, r := range p.Rules {
		parts = append(parts, ruleLabel(p, i, core.RuleState{Limit: r.Limit, Window: r.Window, Calendar: r.Calendar}))
	}
	s := strings.Join(parts, ", ") + " · " + p.Algorithm.String()
	switch lo := p.Lockout; {
	case lo.For > 0 && lo.Max > lo.For:
		s += fmt.Sprintf(" · locks out for %s, doubling up to %s", short(lo.For), short(lo.Max))
	case lo.For > 0:
		s += fmt.Sprintf(" · locks out for %s", short(lo.For))
	}
	return s
}
