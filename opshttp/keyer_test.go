package opshttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/test/testkit"
	"github.com/ratekit/ratekit/keyfunc/personal"
	"github.com/ratekit/ratekit/opshttp"
)

// TestKeyer is support unlocking a user whose limits are keyed by
// pseudonyms (package keyfunc/personal): they have the user name or the
// phone number, the store has an HMAC of it.
func TestKeyer(t *testing.T) {
	ctx := context.Background()
	secret := []byte("app secret")
	account := []personal.Option{personal.Secret(secret)}
	phone := []personal.Option{personal.Secret(secret), personal.DefaultRegion("CN")}
	rule := []core.Rule{{Limit: 2, Window: time.Hour}}
	logins := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "login-account", Rules: rule})
	sms := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "sms-phone", Rules: rule})
	ips := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "login-ip", Rules: rule})

	// What the app's key functions store for alice, her phone and an IP.
	aliceKey, err := personal.AccountKey("alice@example.com", account...)
	if err != nil {
		t.Fatal(err)
	}
	phoneKey, err := personal.PhoneKey("+8613800138000", phone...)
	if err != nil {
		t.Fatal(err)
	}
	lockOut := func() {
		t.Helper()
		for _, c := range []struct {
			l   *core.Limiter
			key string
		}{{logins, aliceKey}, {sms, phoneKey}, {ips, "192.0.2.1"}} {
			for range 3 {
				if _, err := c.l.Allow(ctx, c.key); err != nil {
					t.Fatal(err)
				}
			}
			if d, _ := c.l.Peek(ctx, c.key); d.Allowed {
				t.Fatalf("%s %q not locked out", c.l.Policy().Name, c.key)
			}
		}
	}

	h := opshttp.Handler([]*core.Limiter{logins, sms, ips}, anyone,
		opshttp.WithKeyer("login-account", func(id string) (string, error) { return personal.AccountKey(id, account...) }),
		opshttp.WithKeyer("sms-phone", func(id string) (string, error) { return personal.PhoneKey(id, phone...) }))
	srv := mounted(t, h)
	const base = "/admin/ratelimit/policies/"

	t.Run("peek and reset by identifier", func(t *testing.T) {
		for _, tc := range []struct {
			policy, id string
			l          *core.Limiter
			key        string
		}{
			{"login-account", "  Alice@Example.COM ", logins, aliceKey},
			{"sms-phone", "138-0013-8000", sms, phoneKey},
			{"sms-phone", "+86 138 0013 8000", sms, phoneKey},
			{"login-ip", "192.0.2.1", ips, "192.0.2.1"}, // no keyer: the stored key
		} {
			lockOut()
			target := base + tc.policy + "/keys/" + url.PathEscape(tc.id)
			a := send(t, srv, "GET", target)
			var st opshttp.KeyState
			if err := json.Unmarshal([]byte(a.body), &st); err != nil || a.status != 200 {
				t.Fatalf("GET %s = %d %s", target, a.status, a.body)
			}
			if st.Allowed || st.Rules[0].Used != 2 {
				t.Errorf("GET %s = %+v; want denied with 2 used, as the app answers", target, st)
			}
			if a := send(t, srv, "DELETE", target); a.status != http.StatusNoContent {
				t.Fatalf("DELETE %s = %d %s; want 204", target, a.status, a.body)
			}
			if d, err := tc.l.Allow(ctx, tc.key); err != nil || !d.Allowed {
				t.Errorf("after DELETE %s, the app's Allow = %+v, %v; want admitted", target, d, err)
			}
		}
	})

	t.Run("bad identifiers", func(t *testing.T) {
		for _, tc := range []struct {
			policy, id string
			want       string
		}{
			{"sms-phone", "12345", `{"error":"invalid phone number"}`},
			{"sms-phone", "not a phone", `{"error":"invalid phone number"}`},
			{"login-account", " ", `{"error":"invalid account name"}`},
			{"login-account", strings.Repeat("a", personal.MaxAccountLen+1), `{"error":"invalid account name"}`},
		} {
			for _, method := range []string{"GET", "DELETE"} {
				target := base + tc.policy + "/keys/" + url.PathEscape(tc.id)
				a := send(t, srv, method, target)
				if a.status != http.StatusBadRequest || !isJSON(a) || canon(t, a.body) != canon(t, tc.want) {
					t.Errorf("%s %s = %d %s; want 400 %s", method, target, a.status, a.body, tc.want)
				}
			}
		}
	})

	t.Run("policies say which take identifiers", func(t *testing.T) {
		a := send(t, srv, "GET", "/admin/ratelimit/policies")
		var ps []opshttp.Policy
		if err := json.Unmarshal([]byte(a.body), &ps); err != nil || len(ps) != 3 {
			t.Fatalf("GET /policies = %d %s", a.status, a.body)
		}
		for i, want := range []bool{true, true, false} {
			if ps[i].Identifier != want {
				t.Errorf("policy %s: identifier %v, want %v", ps[i].Name, ps[i].Identifier, want)
			}
		}
	})
}

// TestKeyerErrorWithoutReason: an error with no fixed reason is answered
// with a generic one, never its text.
func TestKeyerErrorWithoutReason(t *testing.T) {
	l := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "p", Rules: []core.Rule{{Limit: 1, Window: time.Second}}})
	h := opshttp.Handler([]*core.Limiter{l}, anyone, opshttp.WithKeyer("p", func(id string) (string, error) {
		if id == "empty" {
			return "", nil
		}
		return "", errors.New("lookup of " + id + " failed: hunter2")
	}))
	srv := mounted(t, h)
	for _, id := range []string{"bob", "empty"} {
		a := send(t, srv, "GET", "/admin/ratelimit/policies/p/keys/"+id)
		if a.status != http.StatusBadRequest || canon(t, a.body) != `{"error":"invalid identifier"}` {
			t.Errorf("GET %s = %d %s; want 400 invalid identifier", id, a.status, a.body)
		}
	}
}

func TestKeyerPanics(t *testing.T) {
	l := testkit.Limiter(t, core.NewMemoryStore(), core.Policy{Name: "p", Rules: []core.Rule{{Limit: 1, Window: time.Second}}})
	f := func(id string) (string, error) { return id, nil }
	tests := []struct {
		name string
		opts []opshttp.Option
	}{
		{"nil func", []opshttp.Option{opshttp.WithKeyer("p", nil)}},
		{"unknown policy", []opshttp.Option{opshttp.WithKeyer("q", f)}},
		{"two keyers", []opshttp.Option{opshttp.WithKeyer("p", f), opshttp.WithKeyer("p", f)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if p := recover(); p == nil || !strings.Contains(fmt.Sprint(p), "WithKeyer") {
					t.Errorf("Handler with %s: panic %v, want one naming WithKeyer", tc.name, p)
				}
			}()
			opshttp.Handler([]*core.Limiter{l}, append(tc.opts, anyone)...)
		})
	}
}
