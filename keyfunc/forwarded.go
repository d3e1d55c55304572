package keyfunc

import (
	"net/netip"
	"strings"
)

// This file parses the RFC 7239 Forwarded header:
//
//	Forwarded         = 1#forwarded-element
//	forwarded-element = [ forwarded-pair ] *( ";" [ forwarded-pair ] )
//	forwarded-pair    = token "=" value
//	value             = token / quoted-string
//
// Elements are split from the right, the side written by the proxies
// nearest to this server, so garbage that a client put on the left cannot
// hide the entries appended after it.

// lastElement splits the last comma-separated element off v, honouring
// quoted strings, and returns it and the rest of v before the comma.
func lastElement(v string) (elem, rest string) {
	inQuote := false
	for i := len(v) - 1; i >= 0; i-- {
		switch v[i] {
		case '"':
			n := 0 // preceding backslashes: an odd count escapes this quote
			for j := i - 1; j >= 0 && v[j] == '\\'; j-- {
				n++
			}
			if n%2 == 0 {
				inQuote = !inQuote
			}
		case ',':
			if !inQuote {
				return v[i+1:], v[:i]
			}
		}
	}
	return v, ""
}

// forwardedFor returns the address in the for= parameter of one Forwarded
// element. It reports false for a malformed element, a missing or repeated
// for=, and the "unknown" and obfuscated ("_hidden") identifiers.
func forwardedFor(elem string) (netip.Addr, bool) {
	var node string
	found := false
	for elem != "" {
		var pair string
		pair, elem = nextPair(elem)
		pair = trimOWS(pair)
		if pair == "" {
			continue
		}
		name, value, ok := strings.Cut(pair, "=")
		if !ok || !isToken(name) || value == "" {
			return netip.Addr{}, false
		}
		if value[0] == '"' {
			var quoted bool
			if value, quoted = unquote(value); !quoted {
				return netip.Addr{}, false
			}
		} else if !isValueToken(value) {
			return netip.Addr{}, false
		}
		if strings.EqualFold(name, "for") {
			if found {
				return netip.Addr{}, false
			}
			node, found = value, true
		}
	}
	if !found {
		return netip.Addr{}, false
	}
	return parseNode(node, true)
}

// nextPair splits the first ";"-separated pair off elem, honouring quoted
// strings.
func nextPair(elem string) (pair, rest string) {
	inQuote := false
	for i := 0; i < len(elem); i++ {
		switch elem[i] {
		case '\\':
			if inQuote {
				i++
			}
		case '"':
			inQuote = !inQuote
		case ';':
			if !inQuote {
				return elem[:i], elem[i+1:]
			}
		}
	}
	return elem, ""
}

// unquote returns the content of an RFC 9110 quoted-string. A string with
// a quoted-pair (backslash escape) is reported as malformed: no address or
// port contains one, and refusing it avoids an allocation.
func unquote(s string) (string, bool) {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return "", false
	}
	s = s[1 : len(s)-1]
	for i := 0; i < len(s); i++ {
		if b := s[i]; b == '"' || b == '\\' || b < ' ' && b != '\t' || b == 0x7f {
			return "", false
		}
	}
	return s, true
}

// isToken reports whether s is an RFC 9110 token.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTokenChar(s[i]) {
			return false
		}
	}
	return true
}

// isValueToken reports whether s is a token, leniently extended with ':',
// '[' and ']' because some proxies write for=192.0.2.1:80 unquoted. The
// node itself is still parsed strictly.
func isValueToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if b := s[i]; !isTokenChar(b) && b != ':' && b != '[' && b != ']' {
			return false
		}
	}
	return true
}

func isTokenChar(b byte) bool {
	switch {
	case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", b) >= 0
}
