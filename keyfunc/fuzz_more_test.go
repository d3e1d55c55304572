package keyfunc_test

import (
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/keyfunc"
)

// fuzzTrusted are the trusted proxies of FuzzForwarded and FuzzXFF; the
// peer is one of them.
var fuzzTrusted = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::/32")}

const fuzzPeer = "10.0.0.1:443"

// keyAddr returns the address of a ClientIP key: the address itself, or
// the masked prefix's address.
func keyAddr(t *testing.T, k string) netip.Addr {
	t.Helper()
	if !validKey(k) {
		t.Fatalf("ClientIP = %q, want an address or a masked prefix", k)
	}
	if a, err := netip.ParseAddr(k); err == nil {
		return a
	}
	return netip.MustParsePrefix(k).Addr()
}

func fuzzIsTrusted(a netip.Addr) bool {
	for _, p := range fuzzTrusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// clientIPFrom runs ClientIP trusting fuzzTrusted on a request from
// fuzzPeer carrying the given values of one header.
func clientIPFrom(t *testing.T, key keyfunc.Func, header string, values ...string) string {
	t.Helper()
	h := http.Header{}
	for _, v := range values {
		h.Add(header, v)
	}
	r := &http.Request{Method: "GET", URL: &url.URL{Path: "/"}, Header: h, RemoteAddr: fuzzPeer}
	k, err := key(keyfunc.FromHTTP(r, ""))
	if err != nil {
		t.Fatalf("ClientIP from a trusted peer with %s %q: %v, want a key", header, values, err)
	}
	return k
}

// checkForwardingKey checks the properties FuzzForwarded and FuzzXFF share
// for a header walked from the right by ClientIP with a trusted peer:
//   - the key is an address or masked prefix, never an error;
//   - an IPv4 key other than the peer's appears in the header as written;
//   - a key naming an untrusted client (the walk stopped there) does not
//     change whatever a client put to the left of the hops the proxies
//     appended: as an earlier header value, or joined with a comma.
func checkForwardingKey(t *testing.T, header, v1, v2, garbage string) {
	t.Helper()
	key := keyfunc.ClientIP(keyfunc.TrustedPrefixes(fuzzTrusted...))
	k := clientIPFrom(t, key, header, v1, v2)
	a := keyAddr(t, k)
	if a.Is4() && k != "10.0.0.1" && !strings.Contains(v1+"\n"+v2, k) {
		t.Fatalf("ClientIP with %s %q, %q = %q: an address the header does not hold", header, v1, v2, k)
	}
	if fuzzIsTrusted(a) {
		return
	}
	if k2 := clientIPFrom(t, key, header, garbage, v1, v2); k2 != k {
		t.Fatalf("ClientIP with %s %q, %q = %q, but %q with %q before: a client can change its key", header, v1, v2, k, k2, garbage)
	}
	if k3 := clientIPFrom(t, key, header, garbage+","+v1, v2); k3 != k {
		t.Fatalf("ClientIP with %s %q, %q = %q, but %q with %q joined before: a client can change its key", header, v1, v2, k, k3, garbage)
	}
}

// FuzzForwarded fuzzes RFC 7239 Forwarded parsing from a trusted proxy.
func FuzzForwarded(f *testing.F) {
	f.Add(`for=192.0.2.60;proto=http;by=203.0.113.43`, `for=10.0.0.2`, `for=198.51.100.1`)
	f.Add(`for="[2001:db8:cafe::17]:4711"`, `For="[2001:db8::1]"`, `for=unknown`)
	f.Add(`for=192.0.2.43, for=198.51.100.17`, ``, `for="_gazonk"`)
	f.Add(`for="a,b\"", for=203.0.113.9`, `for="10.0.0.3";by=x`, `"`)
	f.Add(`for=192.0.2.1;for=192.0.2.2`, `for=[::ffff:192.0.2.9]`, `for="[::ffff:10.1.1.1]:80"`)
	f.Add(`;;, ,for=;`, `for="192.0.2.5:_a1"`, `for="\\"`)
	f.Add(`for="\"192.0.2.1"`, `for=192.0.2.1:99999`, `for="[fe80::1%25eth0]"`)
	f.Add("for=192.0.2.1\x00", "for=\xff", "\"\"\"")
	f.Fuzz(func(t *testing.T, v1, v2, garbage string) {
		checkForwardingKey(t, "Forwarded", v1, v2, garbage)
	})
}

// FuzzXFF fuzzes X-Forwarded-For walking from a trusted proxy.
func FuzzXFF(f *testing.F) {
	f.Add("203.0.113.1, 10.0.0.2", "10.0.0.3", "198.51.100.1")
	f.Add("2001:db8:cafe::17", "[2001:db8::1]:80", "unknown")
	f.Add("192.0.2.1:8080", "", "1.2.3.4, 5.6.7.8")
	f.Add("::ffff:192.0.2.9", "fe80::1%eth0", ",,,")
	f.Add("01.2.3.4", "192.0.2.1 ", "\t192.0.2.2\t")
	f.Add("192.0.2.1\xff", "\x00", "[::1")
	f.Fuzz(func(t *testing.T, v1, v2, garbage string) {
		checkForwardingKey(t, "X-Forwarded-For", v1, v2, garbage)
	})
}
