package keyfunc_test

import (
	"errors"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/keyfunc"
)

// newReq returns a GET request view from remote with headers given as
// name, value pairs; a name may repeat to send several lines.
func newReq(t testing.TB, remote string, headers ...string) keyfunc.Request {
	t.Helper()
	if len(headers)%2 != 0 {
		t.Fatalf("newReq: odd number of header arguments")
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = remote
	for i := 0; i < len(headers); i += 2 {
		r.Header.Add(headers[i], headers[i+1])
	}
	return keyfunc.FromHTTP(r, "")
}

func TestClientIP(t *testing.T) {
	t.Parallel()
	trusted := keyfunc.TrustedProxies("10.0.0.0/8", "2001:db8:ffff::/48")
	const peer = "10.0.0.1:4242"
	tests := []struct {
		name    string
		opts    []keyfunc.IPOption
		remote  string
		headers []string
		want    string
	}{
		// Peer address forms.
		{name: "ipv4 with port", remote: "192.0.2.1:1234", want: "192.0.2.1"},
		{name: "bare ipv4", remote: "192.0.2.1", want: "192.0.2.1"},
		{name: "ipv6 in brackets with port", remote: "[2001:db8:1:2::5]:443", want: "2001:db8:1:2::/64"},
		{name: "ipv6 in brackets", remote: "[2001:db8:1:2::5]", want: "2001:db8:1:2::/64"},
		{name: "bare ipv6", remote: "2001:db8:1:2:3:4:5:6", want: "2001:db8:1:2::/64"},
		{name: "zone stripped", remote: "[fe80::1%eth0]:80", want: "fe80::/64"},
		{name: "ipv4-mapped ipv6 is ipv4", remote: "[::ffff:1.2.3.4]:80", want: "1.2.3.4"},
		{name: "bare ipv4-mapped ipv6 is ipv4", remote: "::ffff:1.2.3.4", want: "1.2.3.4"},

		// Untrusted peers: headers are never read.
		{name: "spoofed xff without trusted proxies", remote: "192.0.2.1:1", headers: []string{"X-Forwarded-For", "198.51.100.7"}, want: "192.0.2.1"},
		{name: "spoofed xff from untrusted peer", opts: []keyfunc.IPOption{trusted}, remote: "192.0.2.1:1", headers: []string{"X-Forwarded-For", "198.51.100.7"}, want: "192.0.2.1"},
		{name: "spoofed forwarded from untrusted peer", opts: []keyfunc.IPOption{trusted}, remote: "192.0.2.1:1", headers: []string{"Forwarded", "for=198.51.100.7"}, want: "192.0.2.1"},
		{name: "spoofed x-real-ip from untrusted peer", opts: []keyfunc.IPOption{trusted, keyfunc.RealIPHeader("X-Real-IP")}, remote: "192.0.2.1:1", headers: []string{"X-Real-IP", "198.51.100.7"}, want: "192.0.2.1"},
		{name: "spoofed trusted-looking xff from untrusted peer", opts: []keyfunc.IPOption{trusted}, remote: "192.0.2.1:1", headers: []string{"X-Forwarded-For", "10.0.0.9"}, want: "192.0.2.1"},

		// X-Forwarded-For from trusted peers.
		{name: "trusted peer without headers", opts: []keyfunc.IPOption{trusted}, remote: peer, want: "10.0.0.1"},
		{name: "xff from trusted peer", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"X-Forwarded-For", "203.0.113.9"}, want: "203.0.113.9"},
		{name: "xff right walk over trusted hops", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"X-Forwarded-For", "198.51.100.7, 203.0.113.9, 10.0.0.2,10.0.0.3"}, want: "203.0.113.9"},
		{name: "xff lines joined", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"X-Forwarded-For", "198.51.100.7", "X-Forwarded-For", "203.0.113.9, 10.0.0.2"}, want: "203.0.113.9"},
		{name: "xff client on earlier line", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"X-Forwarded-For", "203.0.113.9", "X-Forwarded-For", "10.0.0.2"}, want: "203.0.113.9"},
		{name: "xff all hops trusted uses leftmost", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"X-Forwarded-For", "10.0.0.5, 10.0.0.6"}, want: "10.0.0.5"},
		{name: "xff malformed hop stops at nearest trusted", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"X-Forwarded-For", "203.0.113.9, garbage, 10.0.0.2"}, want: "10.0.0.2"},
		{name: "xff garbage falls back to peer", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"X-Forwarded-For", "garbage"}, want: "10.0.0.1"},
		{name: "xff unknown falls back to peer", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"X-Forwarded-For", "unknown"}, want: "10.0.0.1"},
		{name: "xff garbage left of client ignored", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"X-Forwarded-For", "\"garbage\xff, 203.0.113.9"}, want: "203.0.113.9"},
		{name: "xff ipv4 with port", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"X-Forwarded-For", "203.0.113.9:5678"}, want: "203.0.113.9"},
		{name: "xff bracketed ipv6 with port", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"X-Forwarded-For", "[2001:db8:1:2::9]:5678"}, want: "2001:db8:1:2::/64"},
		{name: "xff bare ipv6", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"X-Forwarded-For", "2001:db8:1:2::9"}, want: "2001:db8:1:2::/64"},
		{name: "xff ipv4-mapped", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"X-Forwarded-For", "::ffff:203.0.113.9"}, want: "203.0.113.9"},
		{name: "xff ipv4-mapped trusted hop skipped", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"X-Forwarded-For", "203.0.113.9, ::ffff:10.0.0.2"}, want: "203.0.113.9"},
		{name: "xff empty elements ignored", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"X-Forwarded-For", " , 203.0.113.9,, \t"}, want: "203.0.113.9"},
		{name: "xff from trusted ipv6 peer", opts: []keyfunc.IPOption{trusted}, remote: "[2001:db8:ffff::1]:443", headers: []string{"X-Forwarded-For", "203.0.113.9"}, want: "203.0.113.9"},
		{name: "xff from trusted ipv4-mapped peer", opts: []keyfunc.IPOption{trusted}, remote: "[::ffff:10.0.0.1]:443", headers: []string{"X-Forwarded-For", "203.0.113.9"}, want: "203.0.113.9"},
		{name: "trusted single address", opts: []keyfunc.IPOption{keyfunc.TrustedProxies("192.0.2.10")}, remote: "192.0.2.10:1", headers: []string{"X-Forwarded-For", "203.0.113.9"}, want: "203.0.113.9"},
		{name: "trusted single address does not cover neighbour", opts: []keyfunc.IPOption{keyfunc.TrustedProxies("192.0.2.10")}, remote: "192.0.2.11:1", headers: []string{"X-Forwarded-For", "203.0.113.9"}, want: "192.0.2.11"},
		{name: "trusted prefixes", opts: []keyfunc.IPOption{keyfunc.TrustedPrefixes(netip.MustParsePrefix("192.0.2.0/24"))}, remote: "192.0.2.77:1", headers: []string{"X-Forwarded-For", "203.0.113.9"}, want: "203.0.113.9"},
		{name: "trusted options add up", opts: []keyfunc.IPOption{keyfunc.TrustedProxies("192.0.2.0/24"), keyfunc.TrustedPrefixes(netip.MustParsePrefix("10.0.0.0/8"))}, remote: "192.0.2.77:1", headers: []string{"X-Forwarded-For", "203.0.113.9, 10.0.0.3"}, want: "203.0.113.9"},

		// Forwarded (RFC 7239) from trusted peers.
		{name: "forwarded ipv4", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"Forwarded", "for=203.0.113.9"}, want: "203.0.113.9"},
		{name: "forwarded quoted ipv6 with port", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"Forwarded", `for="[2001:db8:cafe::17]:4711"`}, want: "2001:db8:cafe::/64"},
		{name: "forwarded quoted ipv6 without port", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"Forwarded", `for="[2001:db8:cafe::17]"`}, want: "2001:db8:cafe::/64"},
		{name: "forwarded quoted ipv4 with port", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"Forwarded", `for="203.0.113.9:8080"`}, want: "203.0.113.9"},
		{name: "forwarded obfuscated port", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"Forwarded", `for="203.0.113.9:_p1"`}, want: "203.0.113.9"},
		{name: "forwarded unquoted port tolerated", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"Forwarded", `for=203.0.113.9:8080`}, want: "203.0.113.9"},
		{name: "forwarded case-insensitive name", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"Forwarded", `For=203.0.113.9`}, want: "203.0.113.9"},
		{name: "forwarded with other params", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"Forwarded", `proto=https; for=203.0.113.9;by="[2001:db8::1]";host="example.com"`}, want: "203.0.113.9"},
		{name: "forwarded right walk", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"Forwarded", `for=198.51.100.7, for="[2001:db8:cafe::17]:4711";proto=https, for=10.0.0.2`}, want: "2001:db8:cafe::/64"},
		{name: "forwarded lines joined", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"Forwarded", `for=198.51.100.7`, "Forwarded", `for=203.0.113.9, for=10.0.0.2`}, want: "203.0.113.9"},
		{name: "forwarded all trusted uses leftmost", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"Forwarded", `for=10.0.0.7, for=10.0.0.2`}, want: "10.0.0.7"},
		{name: "forwarded unknown stops at nearest trusted", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"Forwarded", `for=198.51.100.7, for=unknown, for=10.0.0.2`}, want: "10.0.0.2"},
		{name: "forwarded obfuscated node stops", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"Forwarded", `for=_hidden`}, want: "10.0.0.1"},
		{name: "forwarded element without for stops", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"Forwarded", `for=198.51.100.7, proto=https`}, want: "10.0.0.1"},
		{name: "forwarded duplicate for is malformed", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"Forwarded", `for=198.51.100.7;for=203.0.113.9`}, want: "10.0.0.1"},
		{name: "forwarded unbracketed ipv6 is malformed", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"Forwarded", `for="2001:db8:cafe::17"`}, want: "10.0.0.1"},
		{name: "forwarded unterminated quote is malformed", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"Forwarded", `for="203.0.113.9`}, want: "10.0.0.1"},
		{name: "forwarded escaped quote is malformed", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"Forwarded", `for="203.0.113.9\""`}, want: "10.0.0.1"},
		{name: "forwarded quoted garbage on the left ignored", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"Forwarded", `for="a,b\",for=198.51.100.7", for=203.0.113.9`}, want: "203.0.113.9"},
		{name: "forwarded unterminated quote on the left ignored", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"Forwarded", `for="198.51.100.7, for=203.0.113.9`}, want: "203.0.113.9"},
		{name: "forwarded and xff agreeing", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"Forwarded", "for=203.0.113.9", "X-Forwarded-For", "203.0.113.9"}, want: "203.0.113.9"},
		{name: "forwarded spoofed past xff-only proxy", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"Forwarded", "for=198.51.100.7", "X-Forwarded-For", "203.0.113.9"}, want: "10.0.0.1"},
		{name: "xff spoofed past forwarded-only proxy", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"Forwarded", "for=203.0.113.9", "X-Forwarded-For", "198.51.100.7"}, want: "10.0.0.1"},

		// Real-IP headers.
		{name: "x-real-ip ignored unless configured", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"X-Real-IP", "198.51.100.7"}, want: "10.0.0.1"},
		{name: "x-real-ip from trusted peer", opts: []keyfunc.IPOption{trusted, keyfunc.RealIPHeader("X-Real-IP")}, remote: peer, headers: []string{"X-Real-IP", "203.0.113.9"}, want: "203.0.113.9"},
		{name: "x-real-ip wins over xff", opts: []keyfunc.IPOption{trusted, keyfunc.RealIPHeader("X-Real-IP")}, remote: peer, headers: []string{"X-Real-IP", "203.0.113.9", "X-Forwarded-For", "198.51.100.7"}, want: "203.0.113.9"},
		{name: "x-real-ip absent uses xff", opts: []keyfunc.IPOption{trusted, keyfunc.RealIPHeader("X-Real-IP")}, remote: peer, headers: []string{"X-Forwarded-For", "198.51.100.7"}, want: "198.51.100.7"},
		{name: "x-real-ip malformed uses peer", opts: []keyfunc.IPOption{trusted, keyfunc.RealIPHeader("X-Real-IP")}, remote: peer, headers: []string{"X-Real-IP", "203.0.113.9, 198.51.100.7", "X-Forwarded-For", "198.51.100.7"}, want: "10.0.0.1"},
		{name: "x-real-ip repeated uses last", opts: []keyfunc.IPOption{trusted, keyfunc.RealIPHeader("X-Real-IP")}, remote: peer, headers: []string{"X-Real-IP", "198.51.100.7", "X-Real-IP", "203.0.113.9"}, want: "203.0.113.9"},
		{name: "cf-connecting-ip lowercase name", opts: []keyfunc.IPOption{trusted, keyfunc.RealIPHeader("cf-connecting-ip")}, remote: peer, headers: []string{"CF-Connecting-IP", "2001:db8:1:2::9"}, want: "2001:db8:1:2::/64"},
		{name: "real-ip header empty name disables", opts: []keyfunc.IPOption{trusted, keyfunc.RealIPHeader("X-Real-IP"), keyfunc.RealIPHeader("")}, remote: peer, headers: []string{"X-Real-IP", "203.0.113.9"}, want: "10.0.0.1"},

		// Prefix grouping.
		{name: "ipv4 /24", opts: []keyfunc.IPOption{keyfunc.IPv4Prefix(24)}, remote: "192.0.2.77:1", want: "192.0.2.0/24"},
		{name: "ipv6 /48", opts: []keyfunc.IPOption{keyfunc.IPv6Prefix(48)}, remote: "[2001:db8:1:2::5]:1", want: "2001:db8:1::/48"},
		{name: "ipv6 /128 is the address", opts: []keyfunc.IPOption{keyfunc.IPv6Prefix(128)}, remote: "[2001:db8:1:2::5]:1", want: "2001:db8:1:2::5"},
		{name: "ipv4 prefix applies to mapped ipv6", opts: []keyfunc.IPOption{keyfunc.IPv4Prefix(16)}, remote: "[::ffff:192.0.2.77]:1", want: "192.0.0.0/16"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := keyfunc.ClientIP(tc.opts...)(newReq(t, tc.remote, tc.headers...))
			if err != nil || got != tc.want {
				t.Errorf("ClientIP(%q, %q) = %q, %v; want %q, nil", tc.remote, tc.headers, got, err, tc.want)
			}
		})
	}
}

func TestClientIPInvalidPeer(t *testing.T) {
	t.Parallel()
	for _, remote := range []string{
		"", "@", "garbage", "example.com:80", "192.0.2.1:", "192.0.2.1:port", "192.0.2.1:123456",
		"[2001:db8::1", "[2001:db8::1]x", "[192.0.2.1]:80", "999.0.2.1:80", "01.2.3.4",
		"192.0.2.1%eth0", " 192.0.2.1", "\xff\xfe", strings.Repeat("1", 10000),
	} {
		t.Run(remote, func(t *testing.T) {
			t.Parallel()
			for _, f := range []keyfunc.Func{keyfunc.ClientIP(), keyfunc.ClientIP(keyfunc.TrustedProxies("0.0.0.0/0", "::/0"))} {
				got, err := f(newReq(t, remote, "X-Forwarded-For", "203.0.113.9"))
				if !errors.Is(err, keyfunc.ErrInvalidKey) || got != "" {
					t.Errorf("ClientIP(%q) = %q, %v; want error wrapping ErrInvalidKey", remote, got, err)
				}
				if err != nil && strings.Contains(err.Error(), remote) && remote != "" {
					t.Errorf("ClientIP(%q) error %q echoes the input", remote, err)
				}
			}
		})
	}
}

func TestClientIPv6Grouping(t *testing.T) {
	t.Parallel()
	f := keyfunc.ClientIP()
	key := func(remote string) string {
		t.Helper()
		k, err := f(newReq(t, remote))
		if err != nil {
			t.Fatalf("ClientIP(%q): %v", remote, err)
		}
		return k
	}
	tests := []struct {
		name string
		a, b string
		same bool
	}{
		{"same /64", "[2001:db8:1:2::1]:1", "[2001:db8:1:2:ffff:ffff:ffff:ffff]:2", true},
		{"same /64 one with zone", "[2001:db8:1:2::1]:1", "[2001:db8:1:2::2%eth0]:2", true},
		{"neighbouring /64", "[2001:db8:1:2::1]:1", "[2001:db8:1:3::1]:1", false},
		{"ipv4 addresses apart", "192.0.2.1:1", "192.0.2.2:1", false},
		{"mapped and plain ipv4 together", "[::ffff:192.0.2.1]:1", "192.0.2.1:1", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ka, kb := key(tc.a), key(tc.b)
			if (ka == kb) != tc.same {
				t.Errorf("ClientIP(%q) = %q, ClientIP(%q) = %q; want same=%v", tc.a, ka, tc.b, kb, tc.same)
			}
		})
	}
}

// TestClientIPGarbageHeaders sends hostile forwarding headers from a
// trusted peer: no panic, no error, and the key is always an address or
// prefix, never header content.
func TestClientIPGarbageHeaders(t *testing.T) {
	t.Parallel()
	f := keyfunc.ClientIP(keyfunc.TrustedProxies("10.0.0.0/8"), keyfunc.RealIPHeader("X-Real-IP"))
	values := []string{
		"", ",", ",,,,", "\xff\xfe\xfd", "203.0.113.9\x00", "\x00", "\"", "\"\"", `\`, `\"`, `"\`,
		"for=", "for", "=", ";", ";;;", "for=\"", "for=\"[", "for=\"[]\"", "for=\"[::1\"", "for=[::1]]",
		"for=\"\\\\\"", "for=\"a\\\"b\"", "for=\"1.2.3.4\";for", "for=1.2.3.4;;", "for=1.2.3.4:",
		"for=\"[::1]:\"", "for=\"[::1]:_\"", "for=\"[::1]:99999999\"", "for=\"[fe80::1%25eth0]\"",
		"[", "]", "[]", "[:]", "::", ":", "1.2.3.4:1:2", "1.2.3.4]", "[1.2.3.4]",
		"unknown", "_obf", "for=_obf:_obf", "ünïcødé", "203.0.113.9\r\n", strings.Repeat(",", 10000),
		strings.Repeat("\"", 10001), strings.Repeat("\\", 10001) + "\"", strings.Repeat("for=1.2.3.4;", 1000),
		strings.Repeat("10.0.0.1, ", 5000), strings.Repeat("a", 100000),
	}
	for _, v := range values {
		for _, h := range []string{"X-Forwarded-For", "Forwarded", "X-Real-IP"} {
			name := h + "/" + v
			if len(name) > 60 {
				name = name[:60]
			}
			t.Run(name, func(t *testing.T) {
				got, err := f(newReq(t, "10.0.0.1:1", h, v, h, v+", 10.0.0.2"))
				if err != nil {
					t.Fatalf("ClientIP(%s: %.40q) error: %v", h, v, err)
				}
				if !validKey(got) {
					t.Errorf("ClientIP(%s: %.40q) = %q, not an address or prefix", h, v, got)
				}
			})
		}
	}
}

// validKey reports whether k is a canonical address or masked prefix.
func validKey(k string) bool {
	if a, err := netip.ParseAddr(k); err == nil {
		return a.String() == k && a.Zone() == "" && !a.Is4In6()
	}
	p, err := netip.ParsePrefix(k)
	return err == nil && p.Masked() == p && p.String() == k
}

func TestParseTrustedProxies(t *testing.T) {
	t.Parallel()
	got, err := keyfunc.ParseTrustedProxies("10.0.0.0/8", " 192.0.2.7 ", "2001:db8::/32", "::ffff:172.16.0.0/108", "192.168.1.99/24", "fe80::1%eth0")
	if err != nil {
		t.Fatalf("ParseTrustedProxies: %v", err)
	}
	want := []string{"10.0.0.0/8", "192.0.2.7/32", "2001:db8::/32", "172.16.0.0/12", "192.168.1.0/24", "fe80::1/128"}
	if len(got) != len(want) {
		t.Fatalf("ParseTrustedProxies = %v, want %v", got, want)
	}
	for i := range want {
		if got[i].String() != want[i] {
			t.Errorf("ParseTrustedProxies()[%d] = %v, want %v", i, got[i], want[i])
		}
	}

	for _, bad := range []string{"", "10.0.0.0/33", "10.0.0.0/-1", "example.com", "10.0.0", "::1/129", "fe80::/10%eth0"} {
		t.Run(bad, func(t *testing.T) {
			ps, err := keyfunc.ParseTrustedProxies("10.0.0.0/8", bad)
			if err == nil || ps != nil {
				t.Fatalf("ParseTrustedProxies(%q) = %v, %v; want error", bad, ps, err)
			}
			if !strings.HasPrefix(err.Error(), "keyfunc: ") || !strings.Contains(err.Error(), `"`+bad+`"`) {
				t.Errorf("ParseTrustedProxies(%q) error %q does not name the entry", bad, err)
			}
		})
	}
}

func netipZeroPrefix() netip.Prefix { return netip.Prefix{} }
