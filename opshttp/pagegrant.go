package opshttp

import (
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/ratekit/ratekit/core"
)

// grantView is a key's grant on the page.
type grantView struct {
	Extra    int64
	Exempt   bool
	Until    instant
	By, Note string
}

// grantFor are the lengths the page's grant form offers.
var grantFor = map[string]time.Duration{"1h": time.Hour, "24h": 24 * time.Hour, "168h": 7 * 24 * time.Hour, "720h": 30 * 24 * time.Hour}

// grant serves the grant form: a same-origin POST with the form token of
// the page's cookie, that grants the looked-up key ("grant": extra units
// or "exempt", for one of grantFor, by whom and why) or revokes its grant
// ("revoke").
func (p *Page) grant(w http.ResponseWriter, r *http.Request) {
	f, ok := p.form(w, r)
	if !ok {
		return
	}
	v := f.values
	g := core.Grant{By: v.Get("by"), Note: v.Get("note")}
	switch v.Get("action") {
	case "revoke":
	case "grant":
		d, ok := grantFor[v.Get("for")]
		if !ok {
			p.fail(w, r, http.StatusBadRequest, "for must be 1h, 24h, 168h or 720h", "")
			return
		}
		if g.By == "" {
			p.fail(w, r, http.StatusBadRequest, "say who grants it (by)", "")
			return
		}
		g.Until = time.Now().Add(d)
		if v.Get("exempt") == "on" {
			g.Exempt = true
		} else if g.Extra, ok = parseExtra(v.Get("extra")); !ok {
			p.fail(w, r, http.StatusBadRequest, "extra must be a whole number of units above 0, or tick exempt", "")
			return
		}
	default:
		p.fail(w, r, http.StatusBadRequest, "action must be grant or revoke", "")
		return
	}
	if status, msg := p.h.setGrant(r, f.lim, f.key, g); status != 0 {
		p.fail(w, r, status, "grant refused: "+msg, "")
		return
	}
	q := url.Values{"q": {f.l.q}}
	if f.l.asKey {
		q.Set("as", "key")
	}
	w.Header().Set("Location", "./?"+q.Encode())
	w.WriteHeader(http.StatusSeeOther)
}

// parseExtra parses the extra units of the grant form.
func parseExtra(s string) (int64, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && n > 0
}
