// Package peeraddr writes the peer address of a connection as the
// keyfunc.Request views of the fiber and gRPC adapters give it.
package peeraddr

import (
	"net"
	"net/netip"
)

// String returns a.String() in one allocation where a is a *net.TCPAddr
// (net.TCPAddr.String takes three: the IP, the port and the joined
// text), and a.String() otherwise.
func String(a net.Addr) string {
	t, ok := a.(*net.TCPAddr)
	if !ok || t.Zone != "" || t.Port < 0 || t.Port > 65535 {
		return a.String()
	}
	ip, ok := netip.AddrFromSlice(t.IP)
	if !ok {
		return a.String()
	}
	// net.IP writes an IPv4-mapped IPv6 address as IPv4.
	return netip.AddrPortFrom(ip.Unmap(), uint16(t.Port)).String()
}
