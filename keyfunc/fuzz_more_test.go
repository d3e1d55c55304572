package keyfunc_test

import (
	"errors"
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

// clientIPFrom runs key, a ClientIP trusting fuzzTrusted, on a request
// from fuzzPeer carrying the given values of one header. An error must
// wrap ErrInvalidKey with the reason "invalid forwarding header".
func clientIPFrom(t *testing.T, key keyfunc.Func, header string, values ...string) (string, error) {
	t.Helper()
	h := http.Header{}
	for _, v := range values {
		h.Add(header, v)
	}
	r := &http.Request{Method: "GET", URL: &url.URL{Path: "/"}, Header: h, RemoteAddr: fuzzPeer}
	k, err := key(keyfunc.FromHTTP(r, ""))
	if err != nil && (!errors.Is(err, keyfunc.ErrInvalidKey) || k != "" || keyfunc.Reason(err) != "invalid forwarding header") {
		t.Fatalf("ClientIP from a trusted peer with %s %q = %q, %v; want a key or an invalid forwarding header error", header, values, k, err)
	}
	return k, err
}

// checkForwardingKey checks the properties FuzzForwarded and FuzzXFF share
// for a header walked from the right by ClientIP with a trusted peer:
//   - the key is an address or masked prefix, or an error wrapping
//     ErrInvalidKey;
//   - an IPv4 key other than the peer's appears in the header as written;
//   - a key naming an untrusted client (the walk stopped there) does not
//     change whatever a client put to the left of the hops the proxies
//     appended: as an earlier header value, or joined with a comma;
//   - whatever a client sends, when a proxy appends the client's address
//     (and an inner proxy its own), that address is the key: never the
//     proxy's, never an error.
func checkForwardingKey(t *testing.T, header, v1, v2, garbage string) {
	t.Helper()
	key := keyfunc.ClientIP(keyfunc.TrustedPrefixes(fuzzTrusted...), keyfunc.ForwardingHeader(header))
	hop := func(a string) string {
		if header == "Forwarded" {
			return "for=" + a
		}
		return a
	}
	const client = "203.0.113.77"
	for _, vs := range [][]string{
		{v1, v2, hop(client)},
		{v1, v2 + "," + hop(client)},
		{v1, v2 + ", " + hop(client) + ", " + hop("10.0.0.2")},
		{garbage + "," + v1, v2, hop(client) + "," + hop("[2001:db8::2]:443")},
	} {
		if k, err := clientIPFrom(t, key, header, vs...); err != nil || k != client {
			t.Fatalf("ClientIP with %s %q = %q, %v; want %q, the address the proxy appended", header, vs, k, err, client)
		}
	}

	k, err := clientIPFrom(t, key, header, v1, v2)
	if err != nil {
		return
	}
	a := keyAddr(t, k)
	// An IPv4 key not written as such comes from an IPv6 address that
	// embeds it (NAT64, 6to4, Teredo), which has at least two colons.
	if a.Is4() && k != "10.0.0.1" && !strings.Contains(v1+"\n"+v2, k) && strings.Count(v1+"\n"+v2, ":") < 2 {
		t.Fatalf("ClientIP with %s %q, %q = %q: an address the header does not hold", header, v1, v2, k)
	}
	if fuzzIsTrusted(a) {
		return
	}
	if k2, err := clientIPFrom(t, key, header, garbage, v1, v2); err != nil || k2 != k {
		t.Fatalf("ClientIP with %s %q, %q = %q, but %q, %v with %q before: a client can change its key", header, v1, v2, k, k2, err, garbage)
	}
	if k3, err := clientIPFrom(t, key, header, garbage+","+v1, v2); err != nil || k3 != k {
		t.Fatalf("ClientIP with %s %q, %q = %q, but %q, %v with %q joined before: a client can change its key", header, v1, v2, k, k3, err, garbage)
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
	f.Add(`for="[64:ff9b::192.0.2.7]"`, `for="[2002:c000:207::1]"`, `for="[2001:0:4136:e378:8000:63bf:3fff:fdd2]"`)
	f.Add("for=192.0.2.1\x00", "for=\xff", "\"\"\"")
	f.Add(`for="192.0.2.1`, `"`, `"`)
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
	f.Add("64:ff9b::192.0.2.7", "::192.0.2.8", "2002:c000:209::1")
	f.Fuzz(func(t *testing.T, v1, v2, garbage string) {
		checkForwardingKey(t, "X-Forwarded-For", v1, v2, garbage)
	})
}

// FuzzEmbeddedIPv4 checks that an IPv4 client seen through a NAT64
// translator, a 6to4 site, Teredo or an IPv4-compatible address is keyed
// as if it came over IPv4, grouped by IPv4Prefix, and that two IPv4
// clients never share a key through the local-use NAT64 prefix.
func FuzzEmbeddedIPv4(f *testing.F) {
	f.Add([]byte{198, 51, 100, 7}, []byte{192, 0, 2, 1}, uint16(0), uint8(32))
	f.Add([]byte{10, 0, 0, 0}, []byte{10, 0, 0, 1}, uint16(0xffff), uint8(24))
	f.Add([]byte{0, 0, 0, 1}, []byte{255, 255, 255, 255}, uint16(1), uint8(1))
	f.Fuzz(func(t *testing.T, b1, b2 []byte, sub uint16, bits uint8) {
		if len(b1) != 4 || len(b2) != 4 {
			return
		}
		v4Bits := 1 + int(bits)%32
		key := keyfunc.ClientIP(keyfunc.IPv4Prefix(v4Bits))
		keyOf := func(remote string) string {
			t.Helper()
			r := &http.Request{Method: "GET", URL: &url.URL{Path: "/"}, Header: http.Header{}, RemoteAddr: remote}
			k, err := key(keyfunc.FromHTTP(r, ""))
			if err != nil {
				t.Fatalf("ClientIP(%q): %v", remote, err)
			}
			return k
		}
		v4 := netip.AddrFrom4([4]byte(b1))
		want := keyOf(v4.String())
		ipv6 := func(b [16]byte) string { return "[" + netip.AddrFrom16(b).String() + "]:443" }

		var wk, compat, sixToFour, teredo [16]byte
		copy(wk[:], []byte{0, 0x64, 0xff, 0x9b})
		copy(wk[12:], b1)
		copy(compat[12:], b1)
		sixToFour[0], sixToFour[1] = 0x20, 0x02
		copy(sixToFour[2:], b1)
		sixToFour[6], sixToFour[7] = byte(sub>>8), byte(sub)
		sixToFour[15] = 1
		teredo[0], teredo[1] = 0x20, 0x01
		copy(teredo[4:], []byte{0x41, 0x36, 0xe3, 0x78, 0x80, 0, byte(sub >> 8), byte(sub)})
		for i, b := range b1 {
			teredo[12+i] = ^b
		}
		cases := map[string][16]byte{"nat64": wk, "6to4": sixToFour, "teredo": teredo}
		if b1[0] != 0 {
			cases["ipv4-compatible"] = compat
		}
		for name, b := range cases {
			if got := keyOf(ipv6(b)); got != want {
				t.Fatalf("ClientIP(%s %s) = %q, want %q as for %v", name, ipv6(b), got, want, v4)
			}
		}

		// The local-use prefix: distinct clients get distinct keys
		// whichever translation prefix length the network uses.
		if string(b1) == string(b2) || v4Bits != 32 {
			return
		}
		for _, plen := range []int{48, 56, 64, 96} {
			embed := func(v []byte) [16]byte {
				var a [16]byte
				copy(a[:], []byte{0, 0x64, 0xff, 0x9b, 0, 1, byte(sub >> 8), byte(sub)})
				// RFC 6052: the IPv4 address follows the prefix,
				// skipping bits 64 to 71.
				pos := plen / 8
				for _, x := range v {
					if pos == 8 {
						a[pos] = 0
						pos++
					}
					a[pos] = x
					pos++
				}
				for ; pos < 16; pos++ {
					a[pos] = 0
				}
				return a
			}
			if k1, k2 := keyOf(ipv6(embed(b1))), keyOf(ipv6(embed(b2))); k1 == k2 {
				t.Fatalf("local-use /%d: %v and %v share key %q", plen, b1, b2, k1)
			}
		}
	})
}
