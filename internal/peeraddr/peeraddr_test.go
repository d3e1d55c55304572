package peeraddr_test

import (
	"net"
	"testing"

	"github.com/ratekit/ratekit/internal/peeraddr"
	"github.com/ratekit/ratekit/internal/race"
)

func TestString(t *testing.T) {
	addrs := []net.Addr{
		&net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1234},
		&net.TCPAddr{IP: net.IP{192, 0, 2, 1}, Port: 0},
		&net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 443},
		&net.TCPAddr{IP: net.ParseIP("::ffff:203.0.113.9"), Port: 65535},
		&net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 80, Zone: "eth0"},
		&net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 80, Zone: "eth0"},
		&net.TCPAddr{IP: nil, Port: 80},
		&net.TCPAddr{IP: net.IP{1, 2, 3}, Port: 80},
		&net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 70000},
		&net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: -1},
		&net.UnixAddr{Name: "/run/app.sock", Net: "unix"},
		&net.UDPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 53},
	}
	for _, a := range addrs {
		if got, want := peeraddr.String(a), a.String(); got != want {
			t.Errorf("String(%#v) = %q, want %q", a, got, want)
		}
	}
}

func TestStringAllocs(t *testing.T) {
	if race.Enabled {
		t.Skip("the race detector changes allocation counts")
	}
	a := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1234}
	if n := testing.AllocsPerRun(100, func() { _ = peeraddr.String(a) }); n > 1 {
		t.Errorf("String(%v) allocates %v times, want 1", a, n)
	}
}
