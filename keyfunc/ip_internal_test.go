package keyfunc

import "testing"

// ipv4HostCases are peer addresses around the edges of ipv4Host's
// syntax, each with whether it takes the fast path.
var ipv4HostCases = []struct {
	in   string
	fast bool
}{
	{"192.0.2.1:1234", true},
	{"192.0.2.1", true},
	{"0.0.0.0:0", true},
	{"255.255.255.255:65535", true},
	{"10.0.0.1:99999", true}, // parseNode takes any port of up to 5 digits
	{"256.0.0.1:80", false},
	{"01.2.3.4:80", false},
	{"1.2.3.04", false},
	{"1.2.3", false},
	{"1.2.3.4.5", false},
	{"1.2.3.4:", false},
	{"1.2.3.4:123456", false},
	{"1.2.3.4:80:80", false},
	{"1.2.3.4:_a", false},
	{"1..2.3", false},
	{".1.2.3", false},
	{"1.2.3.", false},
	{"1.2.3.:80", false},
	{" 1.2.3.4", false},
	{"1.2.3.4 ", false},
	{"1.2.3.4%eth0", false},
	{"[::ffff:1.2.3.4]:80", false},
	{"::ffff:1.2.3.4", false},
	{"", false},
}

func TestIPv4Host(t *testing.T) {
	for _, tc := range ipv4HostCases {
		_, ok := ipv4Host(tc.in)
		if ok != tc.fast {
			t.Errorf("ipv4Host(%q) ok = %v, want %v", tc.in, ok, tc.fast)
		}
		checkIPv4Host(t, tc.in)
	}
}

// FuzzIPv4Host checks that ClientIP's fast path keys a peer address as
// the general path does, whenever it takes it.
func FuzzIPv4Host(f *testing.F) {
	for _, tc := range ipv4HostCases {
		f.Add(tc.in)
	}
	f.Fuzz(checkIPv4Host)
}

// checkIPv4Host fails t if ipv4Host takes s and keys it otherwise than
// parseNode and key do with ClientIP's defaults.
func checkIPv4Host(t *testing.T, s string) {
	host, ok := ipv4Host(s)
	if !ok {
		return
	}
	a, parsed := parseNode(s, false)
	if !parsed || !a.Is4() {
		t.Fatalf("ipv4Host(%q) = %q, but parseNode reads no IPv4 address", s, host)
	}
	c := &ipConfig{header: headerXForwardedFor, v4Bits: 32, v6Bits: 64}
	if want := c.key(a, s); host != want {
		t.Fatalf("ipv4Host(%q) = %q, want the key %q", s, host, want)
	}
}
