// Package peeraddr writes the peer address of a connection as the
// keyfunc.Request views of the fiber and gRPC adapters give it.
package peeraddr

import (
	"encoding/binary"
	"net"
	"net/netip"
	"sync/atomic"
	"unsafe"
)

// String returns a.String(). For a *net.TCPAddr it returns the text of a
// recent call for the same address, or writes it in one allocation
// (net.TCPAddr.String takes three: the IP, the port and the joined
// text); for any other address, a.String().
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
	ap := netip.AddrPortFrom(ip.Unmap(), uint16(t.Port))
	slot := &texts[slotOf(ap)]
	if e := slot.Load(); e != nil && e.ap == ap {
		return e.text()
	}
	e := &entry{ap: ap}
	e.n = uint8(len(ap.AppendTo(e.buf[:0])))
	slot.Store(e)
	return e.text()
}

// texts holds the texts of recent peers, so that the requests of one
// connection (all the calls of a gRPC connection, the requests of an
// HTTP keep-alive connection), keyed by its peer's address, share one
// text rather than write one each. A slot holds the last address that
// hashed to it; an entry is used only for an address equal to its own, so
// a collision or a recycled address costs a new text, never a wrong one.
// Entries are never changed once stored.
var texts [256]atomic.Pointer[entry]

// entry is the text of one address, in one allocation.
type entry struct {
	ap  netip.AddrPort
	n   uint8
	buf [len("[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535")]byte
}

// text returns the address's text; it shares e's memory, which is never
// written again.
func (e *entry) text() string { return unsafe.String(&e.buf[0], int(e.n)) }

// slotOf returns the slot of ap in texts: the top bits of a
// multiplicative hash of the address's 16 bytes, read as two words, and
// its port.
func slotOf(ap netip.AddrPort) int {
	b := ap.Addr().As16()
	h := (uint64(ap.Port()) ^ binary.BigEndian.Uint64(b[:8])) * 0x9E3779B97F4A7C15
	h = (h ^ binary.BigEndian.Uint64(b[8:])) * 0x9E3779B97F4A7C15
	return int(h >> (64 - 8))
}
