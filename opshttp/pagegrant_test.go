package opshttp_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestPageGrant: the grant form on a looked-up key gives it more units
// (shown on the page read afresh, and admitted by the limiter), exempts
// it, and revokes the grant; it takes the page's form token and origin
// checks (the reset form's, shared), and says why a grant is refused.
func TestPageGrant(t *testing.T) {
	f := newPageFixture(t)
	ctx := context.Background()
	lockOut(t, f.ip, "192.0.2.7")
	page := f.do(t, "GET", "/admin/ops/?q=192.0.2.7&as=key", nil)
	sec := section(t, page.body, "login-ip")
	if !strings.Contains(sec, `action="grant"`) || strings.Contains(sec, `value="revoke"`) {
		t.Fatalf("login-ip section without a grant form (or with a revoke button before any grant):\n%s", sec)
	}
	form := url.Values{"csrf": {token(t, page.body)}, "policy": {"login-ip"}, "q": {"192.0.2.7"}, "as": {"key"},
		"action": {"grant"}, "extra": {"3"}, "for": {"24h"}, "by": {"carol"}, "note": {"office NAT"}}
	a := f.do(t, "POST", "/admin/ops/grant", form)
	if a.status != http.StatusSeeOther || a.header.Get("Location") != "./?as=key&q=192.0.2.7" {
		t.Fatalf("POST grant = %d, Location %q:\n%s", a.status, a.header.Get("Location"), a.body)
	}
	sec = section(t, f.do(t, "GET", "/admin/ops/?q=192.0.2.7&as=key", nil).body, "login-ip")
	for _, want := range []string{"Granted 3 more units on every rule until", "by carol: office NAT", `value="revoke"`, "Admitted"} {
		if !strings.Contains(sec, want) {
			t.Errorf("login-ip after the grant lacks %q:\n%s", want, sec)
		}
	}
	admitted := 0
	for range 5 {
		if d, _ := f.ip.Allow(ctx, "192.0.2.7"); d.Allowed {
			admitted++
		}
	}
	if admitted != 3 {
		t.Errorf("admitted %d after a grant of 3 more to a full key, want 3", admitted)
	}

	form.Set("action", "revoke")
	if a := f.do(t, "POST", "/admin/ops/grant", form); a.status != http.StatusSeeOther {
		t.Fatalf("POST revoke = %d:\n%s", a.status, a.body)
	}
	if d, _ := f.ip.Peek(ctx, "192.0.2.7"); d.Grant != nil || d.Allowed {
		t.Fatalf("after the revocation: Peek = %+v (grant %+v), want refused, no grant", d, d.Grant)
	}
	form.Set("action", "grant")
	form.Set("exempt", "on")
	form.Del("extra")
	if a := f.do(t, "POST", "/admin/ops/grant", form); a.status != http.StatusSeeOther {
		t.Fatalf("POST exempt = %d:\n%s", a.status, a.body)
	}
	if sec := section(t, f.do(t, "GET", "/admin/ops/?q=192.0.2.7&as=key", nil).body, "login-ip"); !strings.Contains(sec, "Granted an exemption until") {
		t.Errorf("login-ip after the exemption:\n%s", sec)
	}

	with := func(k, v string) url.Values {
		u := url.Values{}
		for k, vs := range form {
			u[k] = vs
		}
		if v == "" {
			u.Del(k)
		} else {
			u.Set(k, v)
		}
		return u
	}
	for _, tc := range []struct {
		name   string
		form   url.Values
		header []string
		status int
		reason string
	}{
		{"no token", with("csrf", ""), nil, 403, "missing or stale form token"},
		{"cross-site", form, []string{"Sec-Fetch-Site", "cross-site"}, 403, "cross-origin request refused"},
		{"no by", with("by", ""), nil, 400, "say who grants it"},
		{"other length", with("for", "9999h"), nil, 400, "for must be"},
		{"no extra", with("exempt", ""), nil, 400, "extra must be"},
		{"unknown action", with("action", "raise"), nil, 400, "action must be"},
		{"a store without grants", with("policy", "broken"), nil, 400, "grant refused"},
	} {
		if a := f.do(t, "POST", "/admin/ops/grant", tc.form, tc.header...); a.status != tc.status || !strings.Contains(a.body, tc.reason) {
			t.Errorf("%s: POST grant = %d, want %d %q:\n%s", tc.name, a.status, tc.status, tc.reason, a.body)
		}
	}
}
