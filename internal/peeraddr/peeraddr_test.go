package peeraddr_test

import (
	"fmt"
	"net"
	"sync"
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
	port := 1000
	fresh := func() { port++; a.Port = port; _ = peeraddr.String(a) }
	if n := testing.AllocsPerRun(100, fresh); n > 1 {
		t.Errorf("String(%v) of a new address allocates %v times, want 1", a, n)
	}
	if n := testing.AllocsPerRun(100, func() { _ = peeraddr.String(a) }); n != 0 {
		t.Errorf("String(%v) of the same address again allocates %v times, want 0", a, n)
	}
}

// TestStringRecent: the texts kept for recent addresses are those of
// their own address, whatever addresses share a slot, however a
// *net.TCPAddr is changed between calls, and from any goroutine.
func TestStringRecent(t *testing.T) {
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := &net.TCPAddr{}
			for i := range 5000 {
				// Far more addresses than slots, v4 and v6, each asked twice.
				if i%2 == 0 {
					a.IP = net.IPv4(10, byte(g), byte(i>>8), byte(i))
				} else {
					a.IP = net.ParseIP(fmt.Sprintf("2001:db8::%x:%x", g, i))
				}
				a.Port = i % 7
				for range 2 {
					if got, want := peeraddr.String(a), a.String(); got != want {
						t.Errorf("String(%v) = %q, want %q", a, got, want)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}

// BenchmarkString measures the text of an address seen before: the calls
// of one connection.
func BenchmarkString(b *testing.B) {
	for _, a := range []*net.TCPAddr{
		{IP: net.IPv4(192, 0, 2, 1), Port: 50000},
		{IP: net.ParseIP("2001:db8::1"), Port: 443},
	} {
		b.Run(a.String(), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = peeraddr.String(a)
			}
		})
	}
}
