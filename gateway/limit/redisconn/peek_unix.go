//go:build unix

package redisconn

import "syscall"

// peek reports whether raw has bytes waiting to be read, without reading
// them (MSG_PEEK, non-blocking), and whether it is still open.
func peek(raw syscall.RawConn) (waiting, open bool) {
	var buf [1]byte
	err := raw.Control(func(fd uintptr) {
		n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		waiting = n > 0 && err == nil
	})
	return waiting, err == nil
}

// readWaiting reads into p what raw has waiting, without blocking and
// whatever its deadline (a read past the deadline is refused by the
// runtime before it looks at the socket): 0 when nothing waits.
func readWaiting(raw syscall.RawConn, p []byte) int {
	n := 0
	_ = raw.Control(func(fd uintptr) {
		if m, _, err := syscall.Recvfrom(int(fd), p, syscall.MSG_DONTWAIT); err == nil && m > 0 {
			n = m
		}
	})
	return n
}
