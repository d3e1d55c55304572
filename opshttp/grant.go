package opshttp

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/driver"
)

// GrantState is the JSON form of a [core.Grant].
type GrantState struct {
	// Extra is the units added to every rule's limit; 0 when Exempt.
	Extra int64 `json:"extra,omitempty"`
	// Exempt reports a key admitted uncounted.
	Exempt bool `json:"exempt,omitempty"`
	// Until is when the grant ends, in RFC 3339 (UTC).
	Until string `json:"until"`
	// By and Note are who granted it and why.
	By   string `json:"by,omitempty"`
	Note string `json:"note,omitempty"`
}

// grantState returns the JSON form of g, nil for nil.
func grantState(g *core.Grant) *GrantState {
	if g == nil {
		return nil
	}
	return &GrantState{Extra: g.Extra, Exempt: g.Exempt, Until: g.Until.UTC().Format(time.RFC3339), By: g.By, Note: g.Note}
}

// GrantRequest is the body of a grant (POST .../keys/{key}/grant): Extra
// units more on every rule, or Exempt, for For (Go duration syntax,
// "24h") or until Until (RFC 3339), whichever is set, at most 30 days.
type GrantRequest struct {
	Extra  int64  `json:"extra"`
	Exempt bool   `json:"exempt"`
	For    string `json:"for"`
	Until  string `json:"until"`
	By     string `json:"by"`
	Note   string `json:"note"`
}

// maxGrantBody is the largest body of a grant, in bytes.
const maxGrantBody = 4096

// grant serves POST .../keys/{key}/grant. The body must be JSON, which a
// cross-site form cannot send without the browser asking first.
func (h *handler) grant(w http.ResponseWriter, r *http.Request, policy, seg string) {
	l, key, ok := h.limiterKey(w, policy, seg)
	if !ok {
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		writeJSON(w, http.StatusUnsupportedMediaType, Error{"the body must be application/json"})
		return
	}
	var req GrantRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxGrantBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, Error{fmt.Sprintf("malformed grant: want one JSON object of at most %d bytes with extra or exempt, for or until, by and note", maxGrantBody)})
		return
	}
	g, reason := req.grant(time.Now())
	if reason != "" {
		writeJSON(w, http.StatusBadRequest, Error{reason})
		return
	}
	if status, msg := h.setGrant(r, l, key, g); status != 0 {
		writeJSON(w, status, Error{msg})
		return
	}
	writeJSON(w, http.StatusOK, grantState(&g))
}

// grant returns the grant req asks for at now, or why it is malformed.
func (req GrantRequest) grant(now time.Time) (core.Grant, string) {
	g := core.Grant{Extra: req.Extra, Exempt: req.Exempt, By: req.By, Note: req.Note}
	switch {
	case req.For != "" && req.Until != "":
		return g, "set for or until, not both"
	case req.For != "":
		d, err := time.ParseDuration(req.For)
		if err != nil || d <= 0 {
			return g, "for must be a positive duration, such as 1h or 24h"
		}
		g.Until = now.Add(d)
	case req.Until != "":
		t, err := time.Parse(time.RFC3339, req.Until)
		if err != nil || !t.After(now) {
			return g, "until must be a time to come, in RFC 3339"
		}
		g.Until = t
	default:
		return g, "a grant needs for or until"
	}
	return g, ""
}

// revoke serves DELETE .../keys/{key}/grant.
func (h *handler) revoke(w http.ResponseWriter, r *http.Request, policy, seg string) {
	l, key, ok := h.limiterKey(w, policy, seg)
	if !ok {
		return
	}
	if status, msg := h.setGrant(r, l, key, core.Grant{By: r.URL.Query().Get("by")}); status != 0 {
		writeJSON(w, status, Error{msg})
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// setGrant gives key g under l (a revocation when g.Until is zero) and
// logs it; it returns the status and message of a failure, 0 on success.
// A grant the policy refuses (a listed key, bounds) and one refused while
// an older release runs say why; a store failure says only that.
func (h *handler) setGrant(r *http.Request, l *core.Limiter, key string, g core.Grant) (int, string) {
	err := l.Grant(r.Context(), key, g)
	switch {
	case err == nil:
		msg := "ratekit: opshttp: key granted"
		if g.Until.IsZero() {
			msg = "ratekit: opshttp: grant revoked"
		}
		h.log(r, slog.LevelInfo, msg, l, nil)
		return 0, ""
	case errors.Is(err, core.ErrInvalidPolicy):
		// Why, without the key (answers never echo it).
		why := strings.ReplaceAll(err.Error(), strconv.Quote(key), "the key")
		return http.StatusBadRequest, strings.TrimPrefix(why, "ratekit: ")
	case errors.Is(err, driver.ErrOlderRelease):
		return http.StatusConflict, fmt.Sprintf("%s %s: grant again once every instance runs this release", driver.ErrOlderRelease, l.Policy().Name)
	default:
		h.log(r, slog.LevelWarn, "ratekit: opshttp: grant failed", l, err)
		return http.StatusServiceUnavailable, "store unavailable"
	}
}
