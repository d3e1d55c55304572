package keyfunc_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/internal/race"
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
	fwd := keyfunc.ForwardingHeader("Forwarded")
	realIP := keyfunc.ForwardingHeader("X-Real-IP")
	const peer = "10.0.0.1:4242"
	tests := []struct {
		name    string
		opts    []keyfunc.IPOption
		remote  string
		headers []string
		want    string
		wantErr bool // an error wrapping ErrInvalidKey
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
		{name: "spoofed forwarded from untrusted peer", opts: []keyfunc.IPOption{trusted, fwd}, remote: "192.0.2.1:1", headers: []string{"Forwarded", "for=198.51.100.7"}, want: "192.0.2.1"},
		{name: "spoofed x-real-ip from untrusted peer", opts: []keyfunc.IPOption{trusted, realIP}, remote: "192.0.2.1:1", headers: []string{"X-Real-IP", "198.51.100.7"}, want: "192.0.2.1"},
		{name: "spoofed trusted-looking xff from untrusted peer", opts: []keyfunc.IPOption{trusted}, remote: "192.0.2.1:1", headers: []string{"X-Forwarded-For", "10.0.0.9"}, want: "192.0.2.1"},

		// X-Forwarded-For from trusted peers.
		{name: "trusted peer without headers", opts: []keyfunc.IPOption{trusted}, remote: peer, want: "10.0.0.1"},
		{name: "xff from trusted peer", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"X-Forwarded-For", "203.0.113.9"}, want: "203.0.113.9"},
		{name: "xff right walk over trusted hops", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"X-Forwarded-For", "198.51.100.7, 203.0.113.9, 10.0.0.2,10.0.0.3"}, want: "203.0.113.9"},
		{name: "xff lines joined", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"X-Forwarded-For", "198.51.100.7", "X-Forwarded-For", "203.0.113.9, 10.0.0.2"}, want: "203.0.113.9"},
		{name: "xff client on earlier line", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"X-Forwarded-For", "203.0.113.9", "X-Forwarded-For", "10.0.0.2"}, want: "203.0.113.9"},
		{name: "xff all hops trusted uses leftmost", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"X-Forwarded-For", "10.0.0.5, 10.0.0.6"}, want: "10.0.0.5"},
		{name: "xff malformed hop next to trusted hop is an error", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"X-Forwarded-For", "203.0.113.9, garbage, 10.0.0.2"}, wantErr: true},
		{name: "xff garbage is an error, not the proxy", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"X-Forwarded-For", "garbage"}, wantErr: true},
		{name: "xff unknown is an error, not the proxy", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"X-Forwarded-For", "unknown"}, wantErr: true},
		{name: "xff empty from trusted peer is the proxy itself", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"X-Forwarded-For", " , "}, want: "10.0.0.1"},
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
		{name: "forwarded ipv4", opts: []keyfunc.IPOption{trusted, fwd}, remote: peer, headers: []string{"Forwarded", "for=203.0.113.9"}, want: "203.0.113.9"},
		{name: "forwarded quoted ipv6 with port", opts: []keyfunc.IPOption{trusted, fwd}, remote: peer, headers: []string{"Forwarded", `for="[2001:db8:cafe::17]:4711"`}, want: "2001:db8:cafe::/64"},
		{name: "forwarded quoted ipv6 without port", opts: []keyfunc.IPOption{trusted, fwd}, remote: peer, headers: []string{"Forwarded", `for="[2001:db8:cafe::17]"`}, want: "2001:db8:cafe::/64"},
		{name: "forwarded quoted ipv4 with port", opts: []keyfunc.IPOption{trusted, fwd}, remote: peer, headers: []string{"Forwarded", `for="203.0.113.9:8080"`}, want: "203.0.113.9"},
		{name: "forwarded obfuscated port", opts: []keyfunc.IPOption{trusted, fwd}, remote: peer, headers: []string{"Forwarded", `for="203.0.113.9:_p1"`}, want: "203.0.113.9"},
		{name: "forwarded unquoted port tolerated", opts: []keyfunc.IPOption{trusted, fwd}, remote: peer, headers: []string{"Forwarded", `for=203.0.113.9:8080`}, want: "203.0.113.9"},
		{name: "forwarded case-insensitive name", opts: []keyfunc.IPOption{trusted, fwd}, remote: peer, headers: []string{"Forwarded", `For=203.0.113.9`}, want: "203.0.113.9"},
		{name: "forwarded with other params", opts: []keyfunc.IPOption{trusted, fwd}, remote: peer, headers: []string{"Forwarded", `proto=https; for=203.0.113.9;by="[2001:db8::1]";host="example.com"`}, want: "203.0.113.9"},
		{name: "forwarded right walk", opts: []keyfunc.IPOption{trusted, fwd}, remote: peer, headers: []string{"Forwarded", `for=198.51.100.7, for="[2001:db8:cafe::17]:4711";proto=https, for=10.0.0.2`}, want: "2001:db8:cafe::/64"},
		{name: "forwarded lines joined", opts: []keyfunc.IPOption{trusted, fwd}, remote: peer, headers: []string{"Forwarded", `for=198.51.100.7`, "Forwarded", `for=203.0.113.9, for=10.0.0.2`}, want: "203.0.113.9"},
		{name: "forwarded all trusted uses leftmost", opts: []keyfunc.IPOption{trusted, fwd}, remote: peer, headers: []string{"Forwarded", `for=10.0.0.7, for=10.0.0.2`}, want: "10.0.0.7"},
		{name: "forwarded unknown next to trusted hop is an error", opts: []keyfunc.IPOption{trusted, fwd}, remote: peer, headers: []string{"Forwarded", `for=198.51.100.7, for=unknown, for=10.0.0.2`}, wantErr: true},
		{name: "forwarded obfuscated node is an error", opts: []keyfunc.IPOption{trusted, fwd}, remote: peer, headers: []string{"Forwarded", `for=_hidden`}, wantErr: true},
		{name: "forwarded element without for is an error", opts: []keyfunc.IPOption{trusted, fwd}, remote: peer, headers: []string{"Forwarded", `for=198.51.100.7, proto=https`}, wantErr: true},
		{name: "forwarded duplicate for is malformed", opts: []keyfunc.IPOption{trusted, fwd}, remote: peer, headers: []string{"Forwarded", `for=198.51.100.7;for=203.0.113.9`}, wantErr: true},
		{name: "forwarded unbracketed ipv6 is malformed", opts: []keyfunc.IPOption{trusted, fwd}, remote: peer, headers: []string{"Forwarded", `for="2001:db8:cafe::17"`}, wantErr: true},
		{name: "forwarded unterminated quote is malformed", opts: []keyfunc.IPOption{trusted, fwd}, remote: peer, headers: []string{"Forwarded", `for="203.0.113.9`}, wantErr: true},
		{name: "forwarded escaped quote is malformed", opts: []keyfunc.IPOption{trusted, fwd}, remote: peer, headers: []string{"Forwarded", `for="203.0.113.9\""`}, wantErr: true},
		{name: "forwarded quoted garbage on the left ignored", opts: []keyfunc.IPOption{trusted, fwd}, remote: peer, headers: []string{"Forwarded", `for="a,b\",for=198.51.100.7", for=203.0.113.9`}, want: "203.0.113.9"},
		{name: "forwarded unterminated quote on the left ignored", opts: []keyfunc.IPOption{trusted, fwd}, remote: peer, headers: []string{"Forwarded", `for="198.51.100.7, for=203.0.113.9`}, want: "203.0.113.9"},

		{name: "forwarded configured, xff spoofed past forwarded-only proxy", opts: []keyfunc.IPOption{trusted, fwd}, remote: peer, headers: []string{"Forwarded", "for=203.0.113.9", "X-Forwarded-For", "198.51.100.7"}, want: "203.0.113.9"},
		{name: "forwarded configured, xff alone ignored", opts: []keyfunc.IPOption{trusted, fwd}, remote: peer, headers: []string{"X-Forwarded-For", "198.51.100.7"}, want: "10.0.0.1"},
		{name: "forwarded configured, name case-insensitive", opts: []keyfunc.IPOption{trusted, keyfunc.ForwardingHeader("forwarded")}, remote: peer, headers: []string{"Forwarded", "for=203.0.113.9", "X-Forwarded-For", "198.51.100.7"}, want: "203.0.113.9"},
		{name: "xff configured explicitly", opts: []keyfunc.IPOption{trusted, keyfunc.ForwardingHeader("x-forwarded-for")}, remote: peer, headers: []string{"Forwarded", "for=198.51.100.7", "X-Forwarded-For", "203.0.113.9"}, want: "203.0.113.9"},
		{name: "last forwarding header wins", opts: []keyfunc.IPOption{trusted, fwd, keyfunc.ForwardingHeader("X-Real-IP")}, remote: peer, headers: []string{"Forwarded", "for=198.51.100.7", "X-Real-IP", "203.0.113.9"}, want: "203.0.113.9"},
		{name: "empty forwarding header restores xff", opts: []keyfunc.IPOption{trusted, fwd, keyfunc.ForwardingHeader("")}, remote: peer, headers: []string{"Forwarded", "for=198.51.100.7", "X-Forwarded-For", "203.0.113.9"}, want: "203.0.113.9"},
		{name: "forwarding header from untrusted peer ignored", opts: []keyfunc.IPOption{trusted, fwd}, remote: "192.0.2.1:1", headers: []string{"Forwarded", "for=203.0.113.9"}, want: "192.0.2.1"},
		// Only the configured header is read (X-Forwarded-For by default):
		// a proxy that maintains one passes the others through from the
		// client unchecked.
		{name: "forwarded spoofed past xff-only proxy", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"Forwarded", "for=1.2.3.4", "X-Forwarded-For", "203.0.113.9"}, want: "203.0.113.9"},
		{name: "forwarded garbage past xff-only proxy", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"Forwarded", "for=unknown", "X-Forwarded-For", "203.0.113.9"}, want: "203.0.113.9"},
		{name: "forwarded alone ignored by default", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"Forwarded", "for=1.2.3.4"}, want: "10.0.0.1"},
		{name: "x-real-ip absent does not fall back to xff", opts: []keyfunc.IPOption{trusted, keyfunc.RealIPHeader("X-Real-IP")}, remote: peer, headers: []string{"X-Forwarded-For", "198.51.100.7"}, want: "10.0.0.1"},
		{name: "x-real-ip absent does not fall back to forwarded", opts: []keyfunc.IPOption{trusted, keyfunc.RealIPHeader("X-Real-IP")}, remote: peer, headers: []string{"Forwarded", "for=198.51.100.7"}, want: "10.0.0.1"},
		{name: "x-real-ip garbage is an error, not the proxy", opts: []keyfunc.IPOption{trusted, keyfunc.RealIPHeader("X-Real-IP")}, remote: peer, headers: []string{"X-Real-IP", "unknown", "X-Forwarded-For", "198.51.100.7"}, wantErr: true},

		// Single-address headers, such as X-Real-IP.
		{name: "x-real-ip ignored unless configured", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"X-Real-IP", "198.51.100.7"}, want: "10.0.0.1"},
		{name: "x-real-ip from trusted peer", opts: []keyfunc.IPOption{trusted, realIP}, remote: peer, headers: []string{"X-Real-IP", "203.0.113.9"}, want: "203.0.113.9"},
		{name: "x-real-ip wins over xff", opts: []keyfunc.IPOption{trusted, realIP}, remote: peer, headers: []string{"X-Real-IP", "203.0.113.9", "X-Forwarded-For", "198.51.100.7"}, want: "203.0.113.9"},
		{name: "x-real-ip list walked from the right", opts: []keyfunc.IPOption{trusted, realIP}, remote: peer, headers: []string{"X-Real-IP", "198.51.100.7, 203.0.113.9", "X-Forwarded-For", "198.51.100.8"}, want: "203.0.113.9"},
		{name: "x-real-ip repeated uses last", opts: []keyfunc.IPOption{trusted, realIP}, remote: peer, headers: []string{"X-Real-IP", "198.51.100.7", "X-Real-IP", "203.0.113.9"}, want: "203.0.113.9"},
		{name: "cf-connecting-ip lowercase name", opts: []keyfunc.IPOption{trusted, keyfunc.ForwardingHeader("cf-connecting-ip")}, remote: peer, headers: []string{"CF-Connecting-IP", "2001:db8:1:2::9"}, want: "2001:db8:1:2::/64"},
		{name: "empty name restores xff", opts: []keyfunc.IPOption{trusted, realIP, keyfunc.ForwardingHeader("")}, remote: peer, headers: []string{"X-Real-IP", "203.0.113.9"}, want: "10.0.0.1"},

		{name: "deprecated RealIPHeader is ForwardingHeader", opts: []keyfunc.IPOption{trusted, keyfunc.RealIPHeader("X-Real-IP")}, remote: peer, headers: []string{"X-Real-IP", "203.0.113.9", "X-Forwarded-For", "198.51.100.7"}, want: "203.0.113.9"},
		{name: "x-real-ip trusted address is the host that sent it", opts: []keyfunc.IPOption{trusted, realIP}, remote: peer, headers: []string{"X-Real-IP", "10.0.0.9"}, want: "10.0.0.9"},

		// Prefix grouping.
		{name: "ipv4 /24", opts: []keyfunc.IPOption{keyfunc.IPv4Prefix(24)}, remote: "192.0.2.77:1", want: "192.0.2.0/24"},
		{name: "ipv6 /48", opts: []keyfunc.IPOption{keyfunc.IPv6Prefix(48)}, remote: "[2001:db8:1:2::5]:1", want: "2001:db8:1::/48"},
		{name: "ipv6 /128 is the address", opts: []keyfunc.IPOption{keyfunc.IPv6Prefix(128)}, remote: "[2001:db8:1:2::5]:1", want: "2001:db8:1:2::5"},
		{name: "ipv4 prefix applies to mapped ipv6", opts: []keyfunc.IPOption{keyfunc.IPv4Prefix(16)}, remote: "[::ffff:192.0.2.77]:1", want: "192.0.0.0/16"},

		// IPv4 clients seen through IPv6: keyed by the IPv4 address.
		{name: "nat64 well-known prefix", remote: "[64:ff9b::198.51.100.7]:1", want: "198.51.100.7"},
		{name: "nat64 well-known prefix hex", remote: "[64:ff9b::c633:6407]:1", want: "198.51.100.7"},
		{name: "nat64 well-known prefix grouped by ipv4 prefix", opts: []keyfunc.IPOption{keyfunc.IPv4Prefix(24)}, remote: "[64:ff9b::198.51.100.7]:1", want: "198.51.100.0/24"},
		{name: "nat64 well-known prefix ignores ipv6 prefix", opts: []keyfunc.IPOption{keyfunc.IPv6Prefix(128)}, remote: "[64:ff9b::198.51.100.7]:1", want: "198.51.100.7"},
		{name: "nat64 local-use /96", remote: "[64:ff9b:1::198.51.100.7]:1", want: "198.51.100.7"},
		{name: "nat64 local-use /96 with subnet", remote: "[64:ff9b:1:abcd:ef::c633:6407]:1", want: "198.51.100.7"},
		{name: "nat64 local-use /64 form keyed by whole address", remote: "[64:ff9b:1:0:c6:3364:700:0]:1", want: "64:ff9b:1:0:c6:3364:700:0"},
		{name: "nat64 local-use /48 form keyed by whole address", remote: "[64:ff9b:1:c633:64:700::]:1", want: "64:ff9b:1:c633:64:700::"},
		{name: "nat64 via xff", opts: []keyfunc.IPOption{trusted}, remote: peer, headers: []string{"X-Forwarded-For", "64:ff9b::203.0.113.9"}, want: "203.0.113.9"},
		{name: "ipv4-compatible", remote: "[::198.51.100.7]:1", want: "198.51.100.7"},
		{name: "ipv4-compatible grouped by ipv4 prefix", opts: []keyfunc.IPOption{keyfunc.IPv4Prefix(24)}, remote: "[::c633:6407]:1", want: "198.51.100.0/24"},
		{name: "loopback is not ipv4-compatible", remote: "[::1]:1", want: "::/64"},
		{name: "loopback /128 is not ipv4-compatible", opts: []keyfunc.IPOption{keyfunc.IPv6Prefix(128)}, remote: "[::1]:1", want: "::1"},
		{name: "unspecified is not ipv4-compatible", opts: []keyfunc.IPOption{keyfunc.IPv6Prefix(128)}, remote: "::", want: "::"},
		{name: "6to4 keyed by the site's ipv4", remote: "[2002:c633:6407:1::5]:1", want: "198.51.100.7"},
		{name: "6to4 other subnet same site", remote: "[2002:c633:6407:ffff:1:2:3:4]:1", want: "198.51.100.7"},
		{name: "6to4 grouped by ipv4 prefix", opts: []keyfunc.IPOption{keyfunc.IPv4Prefix(24)}, remote: "[2002:c633:6407::1]:1", want: "198.51.100.0/24"},
		{name: "teredo keyed by the client's mapped ipv4", remote: "[2001:0:4136:e378:8000:63bf:3fff:fdd2]:1", want: "192.0.2.45"},
		{name: "teredo grouped by ipv4 prefix", opts: []keyfunc.IPOption{keyfunc.IPv4Prefix(24)}, remote: "[2001:0:4136:e378:8000:63bf:3fff:fdd2]:1", want: "192.0.2.0/24"},
		{name: "2001:db8 is not teredo", remote: "[2001:db8::c633:6407]:1", want: "2001:db8::/64"},
		{name: "2001:1:: is not teredo", remote: "[2001:1::3fff:fdd2]:1", want: "2001:1::/64"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := keyfunc.ClientIP(tc.opts...)(newReq(t, tc.remote, tc.headers...))
			if tc.wantErr {
				if !errors.Is(err, keyfunc.ErrInvalidKey) || got != "" {
					t.Errorf("ClientIP(%q, %q) = %q, %v; want an error wrapping ErrInvalidKey", tc.remote, tc.headers, got, err)
				}
				return
			}
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
		{"nat64 clients apart", "[64:ff9b::192.0.2.1]:1", "[64:ff9b::192.0.2.2]:1", false},
		{"nat64 and plain ipv4 together", "[64:ff9b::192.0.2.1]:1", "192.0.2.1:1", true},
		{"local-use nat64 clients apart", "[64:ff9b:1::192.0.2.1]:1", "[64:ff9b:1::192.0.2.2]:1", false},
		{"local-use /64-form nat64 clients apart", "[64:ff9b:1:0:c0:2:100:0]:1", "[64:ff9b:1:0:c0:2:200:0]:1", false},
		{"ipv4-compatible clients apart", "[::192.0.2.1]:1", "[::192.0.2.2]:1", false},
		{"teredo clients of one server apart", "[2001:0:4136:e378:8000:63bf:3fff:fdd2]:1", "[2001:0:4136:e378:8000:63bf:3fff:fdd1]:1", false},
		{"teredo and plain ipv4 together", "[2001:0:4136:e378:8000:63bf:3fff:fdd2]:1", "192.0.2.45:1", true},
		{"6to4 site's subnets together", "[2002:c000:201:1::1]:1", "[2002:c000:201:2::1]:1", true},
		{"6to4 sites apart", "[2002:c000:201::1]:1", "[2002:c000:202::1]:1", false},
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
// trusted peer: no panic, and the key is an address or prefix, never
// header content, or an error wrapping ErrInvalidKey that does not quote
// the header.
func TestClientIPGarbageHeaders(t *testing.T) {
	t.Parallel()
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
	for _, h := range []string{"X-Forwarded-For", "Forwarded", "X-Real-IP"} {
		f := keyfunc.ClientIP(keyfunc.TrustedProxies("10.0.0.0/8"), keyfunc.ForwardingHeader(h))
		for _, v := range values {
			name := h + "/" + v
			if len(name) > 60 {
				name = name[:60]
			}
			t.Run(name, func(t *testing.T) {
				got, err := f(newReq(t, "10.0.0.1:1", h, v, h, v+", 10.0.0.2"))
				if err != nil {
					if !errors.Is(err, keyfunc.ErrInvalidKey) || got != "" {
						t.Fatalf("ClientIP(%s: %.40q) = %q, %v; want a key or an error wrapping ErrInvalidKey", h, v, got, err)
					}
					if len(v) > 3 && strings.Contains(err.Error(), v) {
						t.Errorf("ClientIP(%s: %.40q) error %q quotes the header", h, v, err)
					}
					if r := keyfunc.Reason(err); r != "invalid forwarding header" {
						t.Errorf("Reason(ClientIP(%s: %.40q) error) = %q, want %q", h, v, r, "invalid forwarding header")
					}
					return
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
			if !strings.HasPrefix(err.Error(), "ratekit: keyfunc: ") || !strings.Contains(err.Error(), `"`+bad+`"`) {
				t.Errorf("ParseTrustedProxies(%q) error %q does not name the entry", bad, err)
			}
		})
	}
}

func netipZeroPrefix() netip.Prefix { return netip.Prefix{} }

// TestClientIPKeyAllocations: an IPv4 peer keyed as itself costs no
// allocation (the key is the address part of RemoteAddr), and a
// non-canonical form is still keyed canonically.
func TestClientIPKeyAllocations(t *testing.T) {
	key := keyfunc.ClientIP()
	r := keyfunc.FromHTTP(&http.Request{RemoteAddr: "192.0.2.1:1234", Header: http.Header{}}, "")
	if race.Enabled {
		t.Skip("allocation counts differ under the race detector")
	}
	if n := testing.AllocsPerRun(100, func() {
		if k, err := key(r); err != nil || k != "192.0.2.1" {
			t.Fatalf("key = %q, %v", k, err)
		}
	}); n != 0 {
		t.Errorf("ClientIP of an IPv4 peer: %v allocations, want 0", n)
	}
}

// TestInNetworks: the client address is found as ClientIP finds it, a
// forwarding header only from a trusted proxy, and compared as seen.
func TestInNetworks(t *testing.T) {
	nets, err := keyfunc.ParseTrustedProxies("10.0.0.0/8", "2001:db8::/32", "192.0.2.7")
	if err != nil {
		t.Fatal(err)
	}
	trusted := keyfunc.TrustedProxies("172.16.0.1")
	for _, tc := range []struct {
		name   string
		opts   []keyfunc.IPOption
		remote string
		xff    string
		want   bool
	}{
		{"peer inside", nil, "10.1.2.3:5", "", true},
		{"single address", nil, "192.0.2.7:5", "", true},
		{"peer outside", nil, "192.0.2.8:5", "", false},
		{"ipv6 inside", nil, "[2001:db8::9]:5", "", true},
		{"ipv4-mapped peer", nil, "[::ffff:10.0.0.1]:5", "", true},
		{"header from an untrusted peer is ignored", nil, "192.0.2.8:5", "10.0.0.1", false},
		{"client behind a trusted proxy", []keyfunc.IPOption{trusted}, "172.16.0.1:5", "10.9.9.9", true},
		{"spoofed hop before the client", []keyfunc.IPOption{trusted}, "172.16.0.1:5", "10.9.9.9, 198.51.100.1", false},
		{"malformed hop", []keyfunc.IPOption{trusted}, "172.16.0.1:5", "unknown", false},
		{"nat64 client is not its ipv4", nil, "[64:ff9b::a00:1]:5", "", false},
		{"not an address", nil, "@unix", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tc.remote
			if tc.xff != "" {
				r.Header.Set("X-Forwarded-For", tc.xff)
			}
			if got := keyfunc.InNetworks(nets, tc.opts...)(keyfunc.FromHTTP(r, "")); got != tc.want {
				t.Errorf("InNetworks = %v, want %v", got, tc.want)
			}
		})
	}
}

// A request built with http.NewRequest, as a user's own test builds one,
// has no RemoteAddr: ClientIP refuses it (400), as its documentation and
// the README say, rather than key every such request alike.
func TestClientIPWithoutRemoteAddr(t *testing.T) {
	t.Parallel()
	req, err := http.NewRequest("GET", "http://example.com/hello", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := keyfunc.ClientIP()(keyfunc.FromHTTP(req, "")); !errors.Is(err, keyfunc.ErrInvalidKey) {
		t.Errorf("ClientIP(http.NewRequest) error = %v, want ErrInvalidKey", err)
	}
	req.RemoteAddr = "192.0.2.1:1234"
	if got, err := keyfunc.ClientIP()(keyfunc.FromHTTP(req, "")); err != nil || got != "192.0.2.1" {
		t.Errorf("ClientIP with RemoteAddr set = %q, %v; want 192.0.2.1", got, err)
	}
}
