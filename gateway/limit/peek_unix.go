//go:build unix

package limit

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
