package keyfunc_test

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/keyfunc"
)

func FuzzClientIP(f *testing.F) {
	f.Add("10.0.0.1:1234", "203.0.113.9, 10.0.0.2", "", "", true)
	f.Add("10.0.0.1:1234", "", `for="[2001:db8:cafe::17]:4711", for=10.0.0.2`, "", true)
	f.Add("10.0.0.1", "198.51.100.7", "for=198.51.100.7;proto=https", "203.0.113.9", true)
	f.Add("[::ffff:10.0.0.1]:80", "::ffff:203.0.113.9", `for=unknown`, "", true)
	f.Add("[fe80::1%eth0]:80", "[2001:db8::1]:80, garbage", `for="_hidden"`, "2001:db8::1", false)
	f.Add("192.0.2.1:1", "\xff\xfe", `for="a,b\"", for=203.0.113.9`, "\x00", false)
	f.Add("2001:db8::1", ",,,", `;;for=;`, "[", false)
	f.Add("", "", "", "", true)

	trustAll := keyfunc.ClientIP(keyfunc.TrustedProxies("10.0.0.0/8", "2001:db8::/32"), keyfunc.RealIPHeader("X-Real-IP"))
	trustNone := keyfunc.ClientIP()
	f.Fuzz(func(t *testing.T, remote, xff, fwd, realIP string, withRealIP bool) {
		h := http.Header{}
		h.Set("X-Forwarded-For", xff)
		h.Set("Forwarded", fwd)
		if withRealIP {
			h.Set("X-Real-IP", realIP)
		}
		r := &http.Request{Method: "GET", URL: &url.URL{Path: "/"}, Header: h, RemoteAddr: remote}

		peerKey, peerErr := trustNone(keyfunc.FromHTTP(r, ""))
		key, err := trustAll(keyfunc.FromHTTP(r, ""))
		if (err == nil) != (peerErr == nil) {
			t.Fatalf("errors differ with and without trusted proxies: %v vs %v", err, peerErr)
		}
		if err != nil {
			if !errors.Is(err, keyfunc.ErrInvalidKey) || key != "" {
				t.Fatalf("ClientIP(%q) = %q, %v; want error wrapping ErrInvalidKey", remote, key, err)
			}
			return
		}
		if !validKey(key) || !validKey(peerKey) {
			t.Fatalf("ClientIP = %q (trusted), %q (untrusted); want addresses or prefixes", key, peerKey)
		}
		// Headers from an untrusted peer never change the key.
		bare := &http.Request{Method: "GET", URL: &url.URL{Path: "/"}, Header: http.Header{}, RemoteAddr: remote}
		if k, _ := trustNone(keyfunc.FromHTTP(bare, "")); k != peerKey {
			t.Fatalf("untrusted ClientIP depends on headers: %q vs %q", peerKey, k)
		}
		if !strings.HasPrefix(peerKey, "10.") && !strings.HasPrefix(peerKey, "2001:db8:") && key != peerKey {
			t.Fatalf("untrusted peer %q: key %q, want %q", remote, key, peerKey)
		}
	})
}

func FuzzJoin(f *testing.F) {
	f.Add("a|b", "c", "a", "b|c")
	f.Add(`a\`, "b", "a", `\b`)
	f.Add(`a\|`, "", `a`, `|`)
	f.Add("", "", "", "")
	f.Fuzz(func(t *testing.T, a, b, c, d string) {
		r := keyfunc.FromHTTP(&http.Request{URL: &url.URL{}, Header: http.Header{}}, "")
		k1, err1 := keyfunc.Join(constKey(a), constKey(b))(r)
		k2, err2 := keyfunc.Join(constKey(c), constKey(d))(r)
		if err1 != nil || err2 != nil {
			t.Fatalf("Join errors: %v, %v", err1, err2)
		}
		if same := a == c && b == d; (k1 == k2) != same {
			t.Fatalf("Join(%q, %q) = %q, Join(%q, %q) = %q", a, b, k1, c, d, k2)
		}
		// A two-part key never equals a one- or three-part key of other parts.
		k3, _ := keyfunc.Join(constKey(a + "|" + b))(r)
		if k3 == k1 {
			t.Fatalf("Join(%q) = Join(%q, %q) = %q", a+"|"+b, a, b, k1)
		}
	})
}
