package redislib

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core/driver"
)

// TestFleetHeard: what a driver reads of a policy's announcements sets
// the count, the largest Keep and Window, every bucket width, the format
// to write (the newest every member reads: v0.1.0's members, which
// announce no format, read the first) and the configurations that differ,
// reported when they change.
func TestFleetHeard(t *testing.T) {
	var heard [][]string
	f := NewFleet()
	p, fresh := f.Join(driver.Member{Policy: "p", Config: "aaa", Keep: 5, Window: time.Second,
		Widths: []time.Duration{100 * time.Millisecond}, Differ: func(c []string) { heard = append(heard, c) }})
	if !fresh || p.Keep() != 5 || p.Window() != 1e6 || p.Format() != FormatFirst || !slices.Equal(p.Widths(), []int64{100_000}) {
		t.Fatalf("joined: fresh %v, keep %d, window %d, format %d, widths %v", fresh, p.Keep(), p.Window(), p.Format(), p.Widths())
	}
	if again, fresh := f.Join(driver.Member{Policy: "p", Config: "zzz"}); fresh || again != p {
		t.Fatalf("Join twice: fresh %v, same %v; want the first membership", fresh, again == p)
	}
	if want := f.Instance + "|2|5|1000000|aaa|100000|" + LibName; p.Member != want {
		t.Fatalf("member %q, want %q", p.Member, want)
	}
	var at int64 // the server time of each reading, in order
	for _, tc := range []struct {
		name    string
		members []string
		count   int64
		keep    int64
		window  int64
		widths  []int64
		format  int
		heard   int // calls of Differ so far
	}{
		{"alone", []string{p.Member}, 1, 5, 1e6, []int64{100_000}, Formats, 0},
		{"a v0.1.0 instance", []string{p.Member, "old1"}, 2, 5, 1e6, []int64{100_000}, 1, 0},
		{"another configuration", []string{p.Member, "b|1|20|60000000|bbb|6000000,100000"}, 2, 20, 60e6, []int64{100_000, 6_000_000}, 1, 1},
		{"a newer release", []string{p.Member, "c|9|5|1000000|aaa|"}, 2, 5, 1e6, []int64{100_000}, Formats, 2},
		{"nobody read yet", nil, 1, 5, 1e6, []int64{100_000}, Formats, 2},
		{"a garbled member", []string{p.Member, "d|x|y|z|aaa"}, 2, 5, 1e6, []int64{100_000}, Formats, 2},
	} {
		at++
		p.Heard(at, tc.members)
		if p.Instances()() != int(tc.count) || p.Keep() != tc.keep || p.Window() != tc.window || p.Format() != tc.format ||
			!slices.Equal(p.Widths(), tc.widths) || len(heard) != tc.heard {
			t.Errorf("%s: count %d, keep %d, window %d, format %d, widths %v, differ heard %d times; want %d, %d, %d, %d, %v, %d",
				tc.name, p.Instances()(), p.Keep(), p.Window(), p.Format(), p.Widths(), len(heard),
				tc.count, tc.keep, tc.window, tc.format, tc.widths, tc.heard)
		}
	}
	if !slices.Equal(heard[0], []string{"bbb"}) || len(heard[1]) != 0 {
		t.Errorf("Differ heard %q, want [bbb] then none", heard)
	}
	// A reading older than the last one taken (announcements run at
	// once: the beat, Check, a Join) is dropped: its members never undo
	// newer ones.
	p.Heard(at+2, []string{p.Member, "b|1|20|60000000|bbb|"})
	p.Heard(at+1, []string{p.Member})
	if p.Instances()() != 2 || p.Window() != 60e6 || len(heard) != 3 {
		t.Errorf("after a stale reading: count %d, window %d, differ heard %d times; want 2, 60000000, 3 (the stale one dropped)",
			p.Instances()(), p.Window(), len(heard))
	}
}

// TestUnused: the libraries no live instance runs are ratekit's but this
// release's, those announced, and v0.1.0's while one of its instances
// (a member without a library) lives; another program's library is
// never one.
func TestUnused(t *testing.T) {
	const old, other = "ratekit_0123456789ab", "ratekit_ba9876543210"
	libs := []string{LibName, old, other, LegacyLibraries[0], "mylib", "ratekit_short"}
	for _, tc := range []struct {
		name    string
		members []string
		want    []string
	}{
		{"none live", nil, []string{old, other, LegacyLibraries[0]}},
		{"v0.1.0 live", []string{"x1y2"}, []string{old, other}},
		{"a release live", []string{"i|2|5|1000|c||" + old}, []string{other, LegacyLibraries[0]}},
		{"a member without a library", []string{"i|2|5|1000|c|"}, []string{old, other, LegacyLibraries[0]}},
	} {
		if got := Unused(libs, tc.members); !slices.Equal(got, tc.want) {
			t.Errorf("%s: Unused = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestGrantsRead: a grant is refused while a live instance announces a
// format below FormatGrants (or none: v0.1.0), naming the policy.
func TestGrantsRead(t *testing.T) {
	for _, tc := range []struct {
		name    string
		members []string
		refused bool
	}{
		{"nobody", nil, false},
		{"this release", []string{"a|2|5|1000|c||" + LibName}, false},
		{"a newer release", []string{"a|2|5|1000|c||x", "b|3|5|1000|c||y"}, false},
		{"a release of format 1", []string{"a|2|5|1000|c||x", "b|1|5|1000|c||y"}, true},
		{"v0.1.0", []string{"a|2|5|1000|c||x", "old1"}, true},
	} {
		err := GrantsRead("api", tc.members)
		if tc.refused != (err != nil) || tc.refused && (!errors.Is(err, ErrOlderInstance) || !strings.Contains(err.Error(), `policy "api"`)) {
			t.Errorf("%s: GrantsRead = %v, want refused %v naming policy api", tc.name, err, tc.refused)
		}
	}
}

// TestGrantValue: a grant's value round-trips, and the decisions' status
// carries the grant.
func TestGrantValue(t *testing.T) {
	g := driver.Grant{Extra: 10_000, Until: time.UnixMilli(1_900_000_000_123), By: "a|b", Note: "x\"y"}
	got, err := ParseGrant(GrantValue(g))
	if err != nil || got.Extra != g.Extra || got.Exempt || !got.Until.Equal(g.Until) || got.By != g.By || got.Note != g.Note {
		t.Fatalf("ParseGrant(GrantValue(%+v)) = %+v, %v", g, got, err)
	}
	if v := GrantValue(driver.Grant{Exempt: true, Until: g.Until}); !strings.HasPrefix(v, "0|1|") {
		t.Fatalf("exempt value %q", v)
	}
	for _, tc := range []struct {
		status, base float64
		extra        int64
		exempt       bool
	}{{1, 1, 0, false}, {2, 2, 0, false}, {5, 1, 0, true}, {4*(10+2) + 0, 0, 10, false}, {4*(7+2) + 2, 2, 7, false}} {
		base, extra, exempt := grantOf(tc.status)
		if base != tc.base || extra != tc.extra || exempt != tc.exempt {
			t.Errorf("grantOf(%v) = %v, %d, %v; want %v, %d, %v", tc.status, base, extra, exempt, tc.base, tc.extra, tc.exempt)
		}
	}
}
