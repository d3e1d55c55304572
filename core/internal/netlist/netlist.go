// Package netlist matches keys against a policy's allow or deny list:
// exact keys, and CIDR prefixes that hold the keys that are an IP address
// (v4 or v6) or an address prefix (the key of a client grouped by its
// /64), such as keyfunc.ClientIP returns.
package netlist

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// MaxEntries bounds the entries of one list.
const MaxEntries = 10_000

// maxPrefixes bounds the CIDR prefixes of one list: a key is matched
// against each in turn.
const maxPrefixes = 256

// List is a parsed list. The zero List matches nothing. It is safe for
// concurrent use once parsed.
type List struct {
	exact    map[string]struct{}
	prefixes []netip.Prefix
}

// Parse parses entries: an entry that parses as a CIDR prefix
// ("10.0.0.0/8", "2001:db8::/32") holds every address key within it;
// any other is a key matched exactly, an IP address as its canonical
// form. It returns nil for no entries, and an error naming the first bad
// entry by its index.
func Parse(entries []string) (*List, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	if len(entries) > MaxEntries {
		return nil, fmt.Errorf("%d entries, at most %d", len(entries), MaxEntries)
	}
	l := &List{exact: make(map[string]struct{}, len(entries))}
	for i, e := range entries {
		if e == "" || strings.TrimSpace(e) != e {
			return nil, fmt.Errorf("entry %d (%q): empty or with surrounding spaces", i, e)
		}
		if strings.IndexByte(e, '/') >= 0 {
			if p, err := netip.ParsePrefix(e); err == nil {
				if len(l.prefixes) == maxPrefixes {
					return nil, fmt.Errorf("entry %d (%q): more than %d CIDR prefixes", i, e, maxPrefixes)
				}
				l.prefixes = append(l.prefixes, p.Masked())
				continue
			} else if looksLikeCIDR(e) {
				return nil, fmt.Errorf("entry %d (%q): %w", i, e, errors.Unwrap(err))
			}
		}
		if a, err := netip.ParseAddr(e); err == nil {
			e = a.Unmap().String()
		}
		l.exact[e] = struct{}{}
	}
	return l, nil
}

// looksLikeCIDR reports whether e is an address, a slash and digits: a
// CIDR prefix meant, that does not parse.
func looksLikeCIDR(e string) bool {
	addr, bits, _ := strings.Cut(e, "/")
	if _, err := netip.ParseAddr(addr); err != nil {
		return false
	}
	return bits != "" && strings.Trim(bits, "0123456789") == ""
}

// Match reports whether l holds key: as an exact key, or as an address
// (or address prefix) within one of its CIDR prefixes.
func (l *List) Match(key string) bool {
	if l == nil {
		return false
	}
	if _, ok := l.exact[key]; ok {
		return true
	}
	if len(l.prefixes) == 0 && !strings.ContainsAny(key, ".:") {
		return false
	}
	p, ok := addrPrefix(key)
	if !ok {
		return false
	}
	if p.IsSingleIP() {
		if _, ok := l.exact[p.Addr().String()]; ok {
			return true
		}
	}
	for _, q := range l.prefixes {
		if q.Bits() <= p.Bits() && q.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

// addrPrefix parses key as an address (a prefix of its full length) or
// an address prefix, IPv4-mapped IPv6 addresses as IPv4.
func addrPrefix(key string) (netip.Prefix, bool) {
	if strings.IndexByte(key, '/') >= 0 {
		p, err := netip.ParsePrefix(key)
		if err != nil {
			return netip.Prefix{}, false
		}
		return p.Masked(), true
	}
	a, err := netip.ParseAddr(key)
	if err != nil {
		return netip.Prefix{}, false
	}
	a = a.Unmap().WithZone("")
	return netip.PrefixFrom(a, a.BitLen()), true
}
