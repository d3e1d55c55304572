package keyfunc

import (
	"fmt"
	"net/netip"
	"net/textproto"
	"strings"
)

// IPOption configures [ClientIP].
type IPOption func(*ipConfig)

type ipConfig struct {
	trusted []netip.Prefix
	header  string // canonical name of the header the proxies maintain
	v4Bits  int
	v6Bits  int
}

// Names of the forwarding headers ClientIP knows the syntax of.
const (
	headerForwarded     = "Forwarded"
	headerXForwardedFor = "X-Forwarded-For"
)

// errBadPeer is returned for a RemoteAddr that is not an IP address. It
// carries no detail from the request, so it cannot echo attacker input.
var errBadPeer = fmt.Errorf("ratekit: keyfunc: client ip: peer address is not an ip address: %w", ErrInvalidKey)

// TrustedProxies trusts the proxies in the given CIDR prefixes
// ("10.0.0.0/8", "2001:db8::/32") or single addresses ("192.0.2.7"). Only
// when the immediate peer is inside one of them does [ClientIP] read
// forwarding headers. None are trusted by default, so the key is the peer
// address and no header is read.
//
// TrustedProxies panics if an entry is not a valid prefix or address, like
// [regexp.MustCompile]; use [ParseTrustedProxies] and [TrustedPrefixes] for
// values read from configuration. Options add up: several TrustedProxies
// and TrustedPrefixes options trust the union.
func TrustedProxies(cidrs ...string) IPOption {
	ps, err := ParseTrustedProxies(cidrs...)
	if err != nil {
		panic(err.Error())
	}
	return func(c *ipConfig) { c.trusted = append(c.trusted, ps...) }
}

// ParseTrustedProxies parses CIDR prefixes or single addresses, as
// accepted by [TrustedProxies], for use with [TrustedPrefixes]. Surrounding
// spaces are ignored. IPv4-mapped IPv6 entries (::ffff:10.0.0.0/104) are
// converted to IPv4, and host bits are masked off. The error names the
// first entry that does not parse.
func ParseTrustedProxies(cidrs ...string) ([]netip.Prefix, error) {
	ps := make([]netip.Prefix, 0, len(cidrs))
	for _, s := range cidrs {
		s = strings.TrimSpace(s)
		var p netip.Prefix
		if strings.Contains(s, "/") {
			var err error
			if p, err = netip.ParsePrefix(s); err != nil {
				return nil, fmt.Errorf("ratekit: keyfunc: trusted proxy %q is not a CIDR prefix: %w", s, err)
			}
		} else {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("ratekit: keyfunc: trusted proxy %q is not an ip address or CIDR prefix: %w", s, err)
			}
			a = a.WithZone("")
			p = netip.PrefixFrom(a, a.BitLen())
		}
		ps = append(ps, normPrefix(p))
	}
	return ps, nil
}

// TrustedPrefixes trusts the proxies in the given prefixes; see
// [TrustedProxies]. None are trusted by default. It panics on an invalid
// (zero) prefix.
func TrustedPrefixes(p ...netip.Prefix) IPOption {
	ps := make([]netip.Prefix, len(p))
	for i, q := range p {
		if !q.IsValid() {
			panic(fmt.Sprintf("ratekit: keyfunc: TrustedPrefixes: invalid prefix %v at index %d", q, i))
		}
		ps[i] = normPrefix(q)
	}
	return func(c *ipConfig) { c.trusted = append(c.trusted, ps...) }
}

// normPrefix masks p and converts IPv4-mapped IPv6 prefixes to IPv4, the
// form in which ClientIP compares addresses.
func normPrefix(p netip.Prefix) netip.Prefix {
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked()
}

// ForwardingHeader names the header in which your trusted proxies pass on
// the client address. It is the only header [ClientIP] reads, and only
// from a trusted peer:
//
//   - "X-Forwarded-For", the default: a comma-separated list to which each
//     proxy appends the address of its own peer (nginx's
//     $proxy_add_x_forwarded_for, HAProxy's option forwardfor, most cloud
//     load balancers);
//   - "Forwarded": the RFC 7239 header, read the same way through its for=
//     parameters (nginx, for one, does not maintain it unless told to);
//   - any other name, such as "X-Real-IP", "CF-Connecting-IP",
//     "True-Client-IP" or "Fly-Client-IP": a header the proxy sets to the
//     client address, read like X-Forwarded-For (one address is a list of
//     one).
//
// The other forwarding headers are ignored, because a proxy passes the
// headers it does not maintain through from the client unchecked. Name the
// header that every trusted proxy appends to or overwrites; a header that
// some proxy passes through lets the clients of that proxy choose their
// keys. Options do not add up: the last ForwardingHeader wins, and ""
// restores the default. The name is case-insensitive. ForwardingHeader
// panics if name is not a valid header name.
func ForwardingHeader(name string) IPOption {
	if name == "" {
		name = headerXForwardedFor
	}
	if !isToken(name) {
		panic(fmt.Sprintf("ratekit: keyfunc: ForwardingHeader: %q is not a valid header name", name))
	}
	name = textproto.CanonicalMIMEHeaderKey(name)
	return func(c *ipConfig) { c.header = name }
}

// RealIPHeader is [ForwardingHeader]: it names the one header that the
// trusted proxies maintain, and "" restores the default, X-Forwarded-For.
//
// Deprecated: Use [ForwardingHeader]. RealIPHeader used to read the named
// header and, when a trusted peer did not send it, Forwarded and
// X-Forwarded-For, which the proxy passes through from the client; a
// client could choose its key that way, or land in the proxy's own bucket.
func RealIPHeader(name string) IPOption {
	return ForwardingHeader(name)
}

// IPv6Prefix groups IPv6 clients by their leading bits, so that one host
// cannot rotate through the addresses of its network; the key is then the
// masked prefix, such as "2001:db8:1:2::/64". The default is 64, the
// usual size of one subscriber's network. 128 keys each address on its
// own. IPv6 addresses that stand for an IPv4 client (see [ClientIP]) are
// keyed as IPv4 clients instead, by [IPv4Prefix]. IPv6Prefix panics if
// bits is outside 1..128.
func IPv6Prefix(bits int) IPOption {
	if bits < 1 || bits > 128 {
		panic(fmt.Sprintf("ratekit: keyfunc: IPv6Prefix: %d bits is outside 1..128", bits))
	}
	return func(c *ipConfig) { c.v6Bits = bits }
}

// IPv4Prefix groups IPv4 clients by their leading bits; the key is then
// the masked prefix, such as "192.0.2.0/24". The default is 32: each
// address is its own key, written as the bare address ("192.0.2.1").
// IPv4Prefix panics if bits is outside 1..32.
func IPv4Prefix(bits int) IPOption {
	if bits < 1 || bits > 32 {
		panic(fmt.Sprintf("ratekit: keyfunc: IPv4Prefix: %d bits is outside 1..32", bits))
	}
	return func(c *ipConfig) { c.v4Bits = bits }
}

// ClientIP keys requests by the client's IP address.
//
// By default the key is the peer address ([Request.RemoteAddr]) and no
// header is read, so a client cannot choose its key. Behind a proxy, name
// the proxies with [TrustedProxies] or [TrustedPrefixes], and the header
// they maintain with [ForwardingHeader] (X-Forwarded-For by default). Only
// when the peer is inside a trusted prefix is that header read, and no
// other: its list is walked from the right, the end that the proxies
// nearest to this server wrote; trusted addresses are skipped and the
// first untrusted one is the client.
//
// A trusted proxy's own address is the key only when the request came
// from that proxy itself: the peer sent no such header (or an empty one),
// or every address in it is trusted, and then the leftmost one, the host
// that sent the request, is the key. A hop reached before the client that
// is not an address — malformed, "unknown", an RFC 7239 obfuscated
// identifier, or a Forwarded element without for= — is an error wrapping
// [ErrInvalidKey], which adapters answer with 400 Bad Request: the proxy
// did not say who the client is, and keying by the proxy's address
// instead would let one client fill the bucket that all the proxy's
// clients, and the proxy's own health checks, share. Behind correctly
// configured proxies this does not happen, because the hop next to the
// trusted ones is always the address a proxy appended.
//
// Addresses are normalised before keying: IPv6 zones are dropped and
// IPv4-mapped IPv6 addresses (::ffff:192.0.2.1) become IPv4. An IPv4 client
// is keyed by its address ("192.0.2.1"); an IPv6 client by its /64 network
// ("2001:db8:1:2::/64"); see [IPv4Prefix] and [IPv6Prefix]. In general a
// full-length prefix is written as the bare address and a shorter one as
// the masked prefix.
//
// IPv6 addresses that stand for one IPv4 host are keyed by that IPv4
// address, grouped by [IPv4Prefix] like any IPv4 client, so that such
// clients neither share one /64 bucket nor get more buckets than their
// IPv4 address would:
//
//   - NAT64/SIIT translated addresses in the well-known prefix
//     64:ff9b::/96 (RFC 6052): the IPv4 address in the last 32 bits;
//   - those in the local-use prefix 64:ff9b:1::/48 (RFC 8215) are read as
//     /96 translation prefixes too, the usual choice; when the last 24
//     bits are zero the address may instead come from a shorter
//     translation prefix (/48 to /64), which puts the IPv4 address
//     elsewhere, so it is keyed by the whole IPv6 address: one key per
//     IPv4 client still, never one shared by many;
//   - deprecated IPv4-compatible addresses (::192.0.2.1), except those
//     in ::/104, such as :: and the loopback address ::1;
//   - 6to4 addresses (2002::/16, RFC 3056): the site's IPv4 address, bits
//     16 to 47, which owns the whole 2002:<ipv4>::/48 and would otherwise
//     have 65,536 /64 buckets;
//   - Teredo addresses (2001::/32, RFC 4380): the client's public IPv4
//     address, stored inverted in the last 32 bits, where every client of
//     one Teredo server would otherwise share a /64.
//
// Trusted proxies are matched against the address as seen, not the IPv4
// address embedded in it.
//
// A RemoteAddr that is not an IP address ("ip:port", a bare ip, IPv6 in
// brackets), such as a Unix socket peer, is an error wrapping
// [ErrInvalidKey]; the message never quotes it, nor any header. So is an
// empty one: a request built with http.NewRequest, as in a test of your
// own handler, has no RemoteAddr and is answered 400 Bad Request; set
// req.RemoteAddr = "192.0.2.1:1234", or build it with
// httptest.NewRequest, which does. A server always sets it. ClientIP
// never returns [ErrNoKey]. It panics only when an option is invalid, at
// construction.
func ClientIP(opts ...IPOption) Func {
	c := &ipConfig{header: headerXForwardedFor, v4Bits: 32, v6Bits: 64}
	for _, o := range opts {
		o(c)
	}
	client := c.resolver()
	// With no proxy to trust and IPv4 clients keyed by their address, a
	// peer written "a.b.c.d:port" is keyed by its host part as it stands.
	plainIPv4 := len(c.trusted) == 0 && c.v4Bits == 32
	return func(r Request) (string, error) {
		ra := r.RemoteAddr()
		if plainIPv4 {
			if host, ok := ipv4Host(ra); ok {
				return host, nil
			}
		}
		a, seen, err := client(r, ra)
		if err != nil {
			return "", err
		}
		return c.key(a, seen), nil
	}
}

// resolver returns the function that finds the client address of a
// request whose RemoteAddr is ra, and the text it was read from, the way
// ClientIP does.
func (c *ipConfig) resolver() func(r Request, ra string) (netip.Addr, string, error) {
	forwarded := c.header == headerForwarded
	errBadHop := withReason(fmt.Errorf("ratekit: keyfunc: client ip: %s from a trusted proxy names no client address: %w",
		c.header, ErrInvalidKey), "invalid forwarding header")
	return func(r Request, ra string) (netip.Addr, string, error) {
		peer, ok := parseNode(ra, false)
		if !ok {
			return netip.Addr{}, "", errBadPeer
		}
		if len(c.trusted) == 0 || !c.isTrusted(peer) {
			return peer, ra, nil
		}
		a, seen, ok := c.walk(r.Values(c.header), peer, ra, forwarded)
		if !ok {
			return netip.Addr{}, "", errBadHop
		}
		return a, seen, nil
	}
}

// InNetworks reports whether a request's client address, found as
// [ClientIP] finds it with the same options (trusted proxies, forwarding
// header), is inside one of the prefixes: an allow list for guard.WithSkip
// (internal callers, monitoring) or a deny list for guard.WithBlock. It is
// false when the client address cannot be found (then the key function
// decides: ClientIP refuses the request). Addresses are compared as seen,
// IPv4-mapped IPv6 as IPv4; an IPv6 address that embeds an IPv4 one
// (NAT64, 6to4, Teredo) matches only prefixes of its own, so list those
// translation prefixes to match their clients. Parse configured lists with
// netip.ParsePrefix or [ParseTrustedProxies]. It panics on an invalid
// (zero) prefix or option, at construction.
func InNetworks(prefixes []netip.Prefix, opts ...IPOption) func(r Request) bool {
	nets := make([]netip.Prefix, len(prefixes))
	for i, p := range prefixes {
		if !p.IsValid() {
			panic(fmt.Sprintf("ratekit: keyfunc: InNetworks: invalid prefix %v at index %d", p, i))
		}
		nets[i] = normPrefix(p)
	}
	c := &ipConfig{header: headerXForwardedFor, v4Bits: 32, v6Bits: 64}
	for _, o := range opts {
		o(c)
	}
	client := c.resolver()
	return func(r Request) bool {
		a, _, err := client(r, r.RemoteAddr())
		if err != nil {
			return false
		}
		for _, p := range nets {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
}

func (c *ipConfig) isTrusted(a netip.Addr) bool {
	for _, p := range c.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// walk walks the comma-separated hop list formed by joining vals from the
// right, starting at the trusted peer (written peerText), and returns the
// client address and the text it was read from: the first untrusted one,
// or, when every hop is trusted, the leftmost hop (or peer, for an empty
// list). It reports false when a hop reached before the client is not an
// address. forwarded selects RFC 7239 element syntax instead of
// X-Forwarded-For.
func (c *ipConfig) walk(vals []string, peer netip.Addr, peerText string, forwarded bool) (netip.Addr, string, bool) {
	last, lastText := peer, peerText
	for i := len(vals) - 1; i >= 0; i-- {
		v := vals[i]
		for v != "" {
			var elem string
			if forwarded {
				elem, v = lastElement(v)
			} else if j := strings.LastIndexByte(v, ','); j >= 0 {
				elem, v = v[j+1:], v[:j]
			} else {
				elem, v = v, ""
			}
			elem = trimOWS(elem)
			if elem == "" {
				continue // empty list elements are ignored (RFC 9110 5.6.1)
			}
			var a netip.Addr
			var ok bool
			if forwarded {
				a, ok = forwardedFor(elem)
			} else {
				a, ok = parseNode(elem, false)
			}
			if !ok {
				return netip.Addr{}, "", false
			}
			if !c.isTrusted(a) {
				return a, elem, true
			}
			last, lastText = a, elem
		}
	}
	return last, lastText, true
}

// key formats a as ClientIP's key: the bare address for a full-length
// prefix, the masked prefix otherwise. An IPv6 address that stands for an
// IPv4 client is keyed as that client. seen is the text a was parsed
// from: when its host part is already the key, the key is that substring
// and costs no allocation.
func (c *ipConfig) key(a netip.Addr, seen string) string {
	var buf [64]byte // longest: IPv6 with embedded IPv4 and "/128"
	bits := c.v6Bits
	if a.Is6() {
		switch v4, e := embeddedIPv4(a); e {
		case embedIPv4:
			a = v4
		case embedUnknown:
			return string(a.AppendTo(buf[:0]))
		}
	}
	if a.Is4() {
		bits = c.v4Bits
	}
	if bits == a.BitLen() {
		b := a.AppendTo(buf[:0])
		if h := hostPart(seen); h == string(b) {
			return h
		}
		return string(b)
	}
	p, err := a.Prefix(bits)
	if err != nil { // unreachable: bits is validated and a is valid
		return string(a.AppendTo(buf[:0]))
	}
	return string(p.AppendTo(buf[:0]))
}

// embedding says how an IPv6 address holds an IPv4 client's address.
type embedding uint8

const (
	embedNone    embedding = iota // a plain IPv6 address
	embedIPv4                     // the IPv4 address is known
	embedUnknown                  // holds one, but where depends on the network
)

// Well-known prefixes of IPv6 addresses that embed an IPv4 address.
var (
	nat64WellKnown = [12]byte{0x00, 0x64, 0xff, 0x9b}            // 64:ff9b::/96, RFC 6052
	nat64LocalUse  = [6]byte{0x00, 0x64, 0xff, 0x9b, 0x00, 0x01} // 64:ff9b:1::/48, RFC 8215
	teredo         = [4]byte{0x20, 0x01, 0x00, 0x00}             // 2001::/32, RFC 4380
	ipv4Compatible = [12]byte{}                                  // ::/96, RFC 4291 (deprecated)
	sixToFour      = [2]byte{0x20, 0x02}                         // 2002::/16, RFC 3056
)

// embeddedIPv4 returns the IPv4 address of the client that the IPv6
// address a stands for; see ClientIP for the prefixes.
func embeddedIPv4(a netip.Addr) (netip.Addr, embedding) {
	b := a.As16()
	switch {
	case [12]byte(b[:12]) == nat64WellKnown:
		return netip.AddrFrom4([4]byte(b[12:])), embedIPv4
	case [6]byte(b[:6]) == nat64LocalUse:
		if b[13]|b[14]|b[15] == 0 {
			return a, embedUnknown // maybe a /48, /56 or /64 translation prefix
		}
		return netip.AddrFrom4([4]byte(b[12:])), embedIPv4
	case [12]byte(b[:12]) == ipv4Compatible:
		if b[12] == 0 {
			return a, embedNone // ::/104: ::, ::1 and no IPv4 unicast address
		}
		return netip.AddrFrom4([4]byte(b[12:])), embedIPv4
	case [2]byte(b[:2]) == sixToFour:
		return netip.AddrFrom4([4]byte(b[2:6])), embedIPv4
	case [4]byte(b[:4]) == teredo:
		return netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]}), embedIPv4
	}
	return a, embedNone
}

// parseNode parses an address with an optional port: "192.0.2.1",
// "192.0.2.1:80", "[2001:db8::1]", "[2001:db8::1]:80" and, unless
// forwarded is set, a bare "2001:db8::1". With forwarded set, the port may
// also be an RFC 7239 obfuscated port ("_a1"). The result has no zone and
// is never an IPv4-mapped IPv6 address.
func parseNode(s string, forwarded bool) (netip.Addr, bool) {
	var host string
	switch {
	case s == "":
		return netip.Addr{}, false
	case s[0] == '[':
		return parseBracketed(s, forwarded)
	}
	i := strings.IndexByte(s, ':')
	switch {
	case i < 0:
		host = s
	case strings.IndexByte(s[i+1:], ':') < 0: // one colon: IPv4 with port
		if !validPort(s[i+1:], forwarded) {
			return netip.Addr{}, false
		}
		host = s[:i]
	default: // bare IPv6
		if forwarded {
			return netip.Addr{}, false // RFC 7239 requires brackets
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Addr{}, false
		}
		return a.WithZone("").Unmap(), true
	}
	a, err := netip.ParseAddr(host)
	if err != nil || !a.Is4() {
		return netip.Addr{}, false
	}
	return a, true
}

// parseBracketed is parseNode of s in brackets: an IPv6 address,
// "[2001:db8::1]" with an optional port.
func parseBracketed(s string, forwarded bool) (netip.Addr, bool) {
	end := strings.IndexByte(s, ']')
	if end < 0 {
		return netip.Addr{}, false
	}
	if rest := s[end+1:]; rest != "" && (rest[0] != ':' || !validPort(rest[1:], forwarded)) {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(s[1:end])
	if err != nil || !a.Is6() {
		return netip.Addr{}, false
	}
	return a.WithZone("").Unmap(), true
}

// ipv4Host returns the host part of s, an IPv4 address with an optional
// port ("192.0.2.1", "192.0.2.1:80"), when that host is written as
// [ClientIP] keys it: four decimal fields of 0 to 255 without leading
// zeros, the only form parseNode accepts for IPv4. It reports false for
// any other text, which parseNode then reads (or refuses).
func ipv4Host(s string) (string, bool) {
	fields, digits, val := 0, 0, 0
	for i := 0; i < len(s); i++ {
		switch b := s[i]; {
		case '0' <= b && b <= '9':
			if digits == 1 && val == 0 {
				return "", false // a leading zero
			}
			val = val*10 + int(b-'0')
			digits++
			if val > 255 {
				return "", false
			}
		case b == '.' || b == ':':
			if digits == 0 {
				return "", false
			}
			fields++
			digits, val = 0, 0
			if b == ':' {
				if fields != 4 || !validPort(s[i+1:], false) {
					return "", false
				}
				return s[:i], true
			}
			if fields == 4 {
				return "", false
			}
		default:
			return "", false
		}
	}
	return s, fields == 3 && digits > 0
}

// hostPart returns the address of an "ipv4:port" text, or the text itself
// when it has no port or is IPv6.
func hostPart(s string) string {
	if i := strings.LastIndexByte(s, ':'); i >= 0 && strings.IndexByte(s[:i], ':') < 0 {
		return s[:i]
	}
	return s
}

// validPort reports whether s is a decimal port of up to 5 digits or, if
// obf is set, an RFC 7239 obfuscated port: "_" followed by ALPHA, DIGIT,
// ".", "_" or "-".
func validPort(s string, obf bool) bool {
	if s == "" {
		return false
	}
	if obf && s[0] == '_' {
		if len(s) == 1 {
			return false
		}
		for i := 1; i < len(s); i++ {
			if !isObfChar(s[i]) {
				return false
			}
		}
		return true
	}
	if len(s) > 5 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func isObfChar(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' ||
		b == '.' || b == '_' || b == '-'
}

// trimOWS trims HTTP optional whitespace (spaces and tabs).
func trimOWS(s string) string {
	for s != "" && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for s != "" && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}
