package redisstore

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// unreadBytes returns how many bytes the socket of raw holds that were
// not read yet (FIONREAD, which Linux names TIOCINQ).
func unreadBytes(raw syscall.RawConn) (n int, ok bool) {
	var err error
	if cerr := raw.Control(func(fd uintptr) { n, err = unix.IoctlGetInt(int(fd), unix.TIOCINQ) }); cerr != nil || err != nil {
		return 0, false
	}
	return n, true
}
