package netlist

import (
	"strings"
	"testing"
)

func TestMatch(t *testing.T) {
	l, err := Parse([]string{"alice", "10.0.0.0/8", "2001:db8::/32", "192.0.2.7", "::ffff:198.51.100.1", "2001:db8:ffff::1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		key  string
		want bool
	}{
		{"alice", true},
		{"bob", false},
		{"10.1.2.3", true},
		{"11.1.2.3", false},
		{"192.0.2.7", true},
		{"192.0.2.8", false},
		{"::ffff:10.9.9.9", true},    // v4-mapped v6 is v4
		{"198.51.100.1", true},       // listed as v4-mapped
		{"2001:db8:1:2::/64", true},  // a client's /64 within the /32
		{"2001:db9:1:2::/64", false}, // outside it
		{"2001:0db8:0000::5", true},  // non-canonical spelling
		{"2001:db8::/16", false},     // wider than the listed prefix
		{"fe80::1%eth0", false},      // zone dropped, not within
		{"10.0.0.0/8x", false},       // not an address
		{"", false},
	} {
		if got := l.Match(tc.key); got != tc.want {
			t.Errorf("Match(%q) = %v, want %v", tc.key, got, tc.want)
		}
	}
	var none *List
	if none.Match("alice") {
		t.Error("nil list matched")
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		entries []string
		want    string
	}{
		{[]string{"a", ""}, "entry 1"},
		{[]string{" a"}, "entry 0"},
		{[]string{"10.0.0.0/33"}, `entry 0 ("10.0.0.0/33")`},
		{[]string{"2001:db8::/129"}, "entry 0"},
		{make([]string, MaxEntries+1), "at most"},
	} {
		_, err := Parse(tc.entries)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%.40q) = %v, want an error naming %s", tc.entries, err, tc.want)
		}
	}
	many := make([]string, maxPrefixes+1)
	for i := range many {
		many[i] = "10.0.0.0/8"
	}
	if _, err := Parse(many); err == nil {
		t.Errorf("Parse of %d prefixes: no error", len(many))
	}
	if l, err := Parse(nil); l != nil || err != nil {
		t.Errorf("Parse(nil) = %v, %v", l, err)
	}
	// A key with a slash that is no prefix is an exact key.
	l, err := Parse([]string{"team/alpha"})
	if err != nil || !l.Match("team/alpha") {
		t.Errorf("Parse(team/alpha) = %v, %v", l, err)
	}
}

func FuzzMatch(f *testing.F) {
	f.Add("10.0.0.0/8", "10.1.2.3")
	f.Add("2001:db8::/32", "2001:db8::/64")
	f.Add("alice", "alice")
	f.Fuzz(func(t *testing.T, entry, key string) {
		l, err := Parse([]string{entry})
		if err != nil {
			return
		}
		m := l.Match(key)
		if key == entry && !m {
			t.Errorf("list %q does not match its own entry", entry)
		}
	})
}
