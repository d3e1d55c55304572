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
	realIP  string // canonical header name; "" when unset
	v4Bits  int
	v6Bits  int
}

// Header names ClientIP reads from trusted peers.
const (
	headerForwarded     = "Forwarded"
	headerXForwardedFor = "X-Forwarded-For"
)

// errBadPeer is returned for a RemoteAddr that is not an IP address. It
// carries no detail from the request, so it cannot echo attacker input.
var errBadPeer = fmt.Errorf("keyfunc: client ip: peer address is not an ip address: %w", ErrInvalidKey)

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
				return nil, fmt.Errorf("keyfunc: trusted proxy %q is not a CIDR prefix: %w", s, err)
			}
		} else {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("keyfunc: trusted proxy %q is not an ip address or CIDR prefix: %w", s, err)
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
			panic(fmt.Sprintf("keyfunc: TrustedPrefixes: invalid prefix %v at index %d", q, i))
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

// RealIPHeader names a single-address header such as "X-Real-IP" or
// "CF-Connecting-IP" that the trusted proxy sets to the client address.
// When a trusted peer sends it, it is used instead of Forwarded and
// X-Forwarded-For; when it is absent those are walked as usual. If the
// header is repeated, the last value (the one nearest to this server)
// counts; a value that is not an address falls back to the peer address.
// Unset (or "") by default.
//
// Only name a header that your trusted proxies always set or overwrite: a
// proxy that passes a client's own X-Real-IP through lets the client choose
// its key.
func RealIPHeader(name string) IPOption {
	if name != "" {
		name = textproto.CanonicalMIMEHeaderKey(name)
	}
	return func(c *ipConfig) { c.realIP = name }
}

// IPv6Prefix groups IPv6 clients by their leading bits, so that one host
// cannot rotate through the addresses of its network; the key is then the
// masked prefix, such as "2001:db8:1:2::/64". The default is 64, the
// usual size of one subscriber's network. 128 keys each address on its
// own. IPv6Prefix panics if bits is outside 1..128.
func IPv6Prefix(bits int) IPOption {
	if bits < 1 || bits > 128 {
		panic(fmt.Sprintf("keyfunc: IPv6Prefix: %d bits is outside 1..128", bits))
	}
	return func(c *ipConfig) { c.v6Bits = bits }
}

// IPv4Prefix groups IPv4 clients by their leading bits; the key is then
// the masked prefix, such as "192.0.2.0/24". The default is 32: each
// address is its own key, written as the bare address ("192.0.2.1").
// IPv4Prefix panics if bits is outside 1..32.
func IPv4Prefix(bits int) IPOption {
	if bits < 1 || bits > 32 {
		panic(fmt.Sprintf("keyfunc: IPv4Prefix: %d bits is outside 1..32", bits))
	}
	return func(c *ipConfig) { c.v4Bits = bits }
}

// ClientIP keys requests by the client's IP address.
//
// By default the key is the peer address ([Request.RemoteAddr]) and no
// header is read, so a client cannot choose its key. Behind a proxy, name
// the proxies with [TrustedProxies] or [TrustedPrefixes]: only when the
// peer is inside a trusted prefix are forwarding headers read, in this
// order:
//
//  1. the [RealIPHeader], if configured and present;
//  2. the RFC 7239 Forwarded header (its for= parameters), else
//     X-Forwarded-For, walked from the right: trusted addresses are
//     skipped and the first untrusted one is the client. If every hop is
//     trusted the leftmost is used.
//
// A hop that cannot be used — malformed, "unknown", an obfuscated
// identifier, or a Forwarded element without for= — ends the walk, and the
// last good address (the nearest trusted hop, which saw that client)
// becomes the key; header content that is not an address never does. When
// both Forwarded and X-Forwarded-For are present and their walks name
// different clients, neither is believed and the peer address is used: a
// proxy that maintains only one of them (nginx's default maintains only
// X-Forwarded-For) passes the other through from the client unchecked.
//
// Addresses are normalised before keying: IPv6 zones are dropped and
// IPv4-mapped IPv6 addresses (::ffff:192.0.2.1) become IPv4. An IPv4 client
// is keyed by its address ("192.0.2.1"); an IPv6 client by its /64 network
// ("2001:db8:1:2::/64"); see [IPv4Prefix] and [IPv6Prefix]. In general a
// full-length prefix is written as the bare address and a shorter one as
// the masked prefix.
//
// A RemoteAddr that is not an IP address ("ip:port", a bare ip, IPv6 in
// brackets), such as a Unix socket peer, is an error wrapping
// [ErrInvalidKey]; the message never quotes it. ClientIP never returns
// [ErrNoKey]. It panics only when an option is invalid, at construction.
func ClientIP(opts ...IPOption) Func {
	c := &ipConfig{v4Bits: 32, v6Bits: 64}
	for _, o := range opts {
		o(c)
	}
	if len(c.trusted) == 0 {
		return func(r Request) (string, error) {
			peer, ok := parseNode(r.RemoteAddr(), false)
			if !ok {
				return "", errBadPeer
			}
			return c.key(peer), nil
		}
	}
	return func(r Request) (string, error) {
		peer, ok := parseNode(r.RemoteAddr(), false)
		if !ok {
			return "", errBadPeer
		}
		return c.key(c.client(r, peer)), nil
	}
}

// client returns the client address of a request from peer.
func (c *ipConfig) client(r Request, peer netip.Addr) netip.Addr {
	if !c.isTrusted(peer) {
		return peer
	}
	if c.realIP != "" {
		if vs := r.Values(c.realIP); len(vs) > 0 {
			if a, ok := parseNode(strings.TrimSpace(vs[len(vs)-1]), false); ok {
				return a
			}
			return peer
		}
	}
	fwd := r.Values(headerForwarded)
	xff := r.Values(headerXForwardedFor)
	switch {
	case len(fwd) > 0 && len(xff) > 0:
		a := c.walk(fwd, peer, true)
		if b := c.walk(xff, peer, false); a != b {
			return peer
		}
		return a
	case len(fwd) > 0:
		return c.walk(fwd, peer, true)
	case len(xff) > 0:
		return c.walk(xff, peer, false)
	}
	return peer
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
// right, starting at the trusted peer, and returns the client address.
// forwarded selects RFC 7239 element syntax instead of X-Forwarded-For.
func (c *ipConfig) walk(vals []string, peer netip.Addr, forwarded bool) netip.Addr {
	last := peer
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
				return last
			}
			if !c.isTrusted(a) {
				return a
			}
			last = a
		}
	}
	return last
}

// key formats a as ClientIP's key: the bare address for a full-length
// prefix, the masked prefix otherwise.
func (c *ipConfig) key(a netip.Addr) string {
	bits := c.v6Bits
	if a.Is4() {
		bits = c.v4Bits
	}
	var buf [64]byte // longest: IPv6 with embedded IPv4 and "/128"
	if bits == a.BitLen() {
		return string(a.AppendTo(buf[:0]))
	}
	p, err := a.Prefix(bits)
	if err != nil { // unreachable: bits is validated and a is valid
		return string(a.AppendTo(buf[:0]))
	}
	return string(p.AppendTo(buf[:0]))
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
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, false
		}
		host = s[1:end]
		if rest := s[end+1:]; rest != "" && (rest[0] != ':' || !validPort(rest[1:], forwarded)) {
			return netip.Addr{}, false
		}
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() {
			return netip.Addr{}, false
		}
		return a.WithZone("").Unmap(), true
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
