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
	f.Add("10.0.0.1:1", "203.0.113.9", "for=1.2.3.4", "", false)
	f.Add("10.0.0.1:1", "203.0.113.9", "for=unknown", "garbage", true)
	f.Add("[::ffff:10.0.0.1]:80", "::ffff:203.0.113.9", `for=unknown`, "", true)
	f.Add("[fe80::1%eth0]:80", "[2001:db8::1]:80, garbage", `for="_hidden"`, "2001:db8::1", false)
	f.Add("192.0.2.1:1", "\xff\xfe", `for="a,b\"", for=203.0.113.9`, "\x00", false)
	f.Add("2001:db8::1", ",,,", `;;for=;`, "[", false)
	f.Add("[64:ff9b::10.0.0.1]:1", "203.0.113.9", "", "", false)
	f.Add("", "", "", "", true)

	trusted := keyfunc.TrustedProxies("10.0.0.0/8", "2001:db8::/32")
	trustNone := keyfunc.ClientIP()
	// Each key function reads one header from trusted peers and ignores
	// the others.
	readers := []struct {
		header string
		key    keyfunc.Func
	}{
		{"X-Forwarded-For", keyfunc.ClientIP(trusted)},
		{"Forwarded", keyfunc.ClientIP(trusted, keyfunc.ForwardingHeader("Forwarded"))},
		{"X-Real-Ip", keyfunc.ClientIP(trusted, keyfunc.ForwardingHeader("X-Real-IP"))},
	}
	f.Fuzz(func(t *testing.T, remote, xff, fwd, realIP string, withRealIP bool) {
		h := http.Header{}
		h.Set("X-Forwarded-For", xff)
		h.Set("Forwarded", fwd)
		if withRealIP {
			h.Set("X-Real-IP", realIP)
		}
		r := &http.Request{Method: "GET", URL: &url.URL{Path: "/"}, Header: h, RemoteAddr: remote}

		peerKey, peerErr := trustNone(keyfunc.FromHTTP(r, ""))
		// Headers from an untrusted peer never change the key.
		bare := &http.Request{Method: "GET", URL: &url.URL{Path: "/"}, Header: http.Header{}, RemoteAddr: remote}
		if k, _ := trustNone(keyfunc.FromHTTP(bare, "")); k != peerKey {
			t.Fatalf("untrusted ClientIP depends on headers: %q vs %q", peerKey, k)
		}
		maybeTrusted := strings.HasPrefix(peerKey, "10.") || strings.HasPrefix(peerKey, "2001:db8:")
		for _, rd := range readers {
			key, err := rd.key(keyfunc.FromHTTP(r, ""))
			switch {
			case peerErr != nil:
				if !errors.Is(err, keyfunc.ErrInvalidKey) || key != "" {
					t.Fatalf("ClientIP(%q) reading %s = %q, %v; want error wrapping ErrInvalidKey", remote, rd.header, key, err)
				}
				continue
			case err != nil:
				// A trusted peer whose header names no client.
				if !errors.Is(err, keyfunc.ErrInvalidKey) || key != "" || !maybeTrusted {
					t.Fatalf("ClientIP(%q) reading %s = %q, %v; want a key, or an error wrapping ErrInvalidKey from a trusted peer", remote, rd.header, key, err)
				}
			case !validKey(key) || !validKey(peerKey):
				t.Fatalf("ClientIP = %q (trusted), %q (untrusted); want addresses or prefixes", key, peerKey)
			case !maybeTrusted && key != peerKey:
				t.Fatalf("untrusted peer %q: key %q, want %q", remote, key, peerKey)
			}
			// Only the configured header counts: the others, which a
			// proxy passes through from the client, change nothing.
			only := &http.Request{Method: "GET", URL: &url.URL{Path: "/"}, Header: http.Header{}, RemoteAddr: remote}
			if vs := h.Values(rd.header); len(vs) > 0 {
				only.Header[rd.header] = vs
			}
			key2, err2 := rd.key(keyfunc.FromHTTP(only, ""))
			if key2 != key || (err2 == nil) != (err == nil) {
				t.Fatalf("ClientIP reading %s = %q, %v with all headers, %q, %v with %s alone", rd.header, key, err, key2, err2, rd.header)
			}
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
