//go:build !linux

package redisstore

import "syscall"

// unreadBytes cannot tell on this system.
func unreadBytes(syscall.RawConn) (int, bool) { return 0, false }
