// Package testslow is a client on a slow link, for tests of streamed
// answers: a socket with a small receive buffer, and a body read paced to
// a rate.
package testslow

import (
	"crypto/sha256"
	"errors"
	"io"
	"syscall"
	"time"
)

// SmallReceiveBuffer, as a net.Dialer's Control, gives a socket a 16 KiB
// receive buffer before it connects, as on a slow link: set after the
// handshake, the window already offered would outgrow the buffer and the
// kernel would drop segments.
func SmallReceiveBuffer(_, _ string, rc syscall.RawConn) error {
	var serr error
	err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 16<<10)
	})
	if err != nil {
		return err
	}
	return serr
}

// ReadBody waits stall, then reads body 32 KiB at a time, paced so that
// by each point it has read no more than bytesPerSec a second since start
// plus the stall (0: as fast as bytes come). It returns how many bytes it
// read, their SHA-256, and the read error: nil when the body ended whole.
func ReadBody(body io.Reader, start time.Time, stall time.Duration, bytesPerSec int) (n int64, sum [32]byte, err error) {
	time.Sleep(stall)
	h := sha256.New()
	buf := make([]byte, 32<<10)
	for {
		m, rerr := body.Read(buf)
		h.Write(buf[:m])
		n += int64(m)
		if rerr != nil {
			if !errors.Is(rerr, io.EOF) {
				err = rerr
			}
			break
		}
		if bytesPerSec > 0 {
			due := stall + time.Duration(float64(n)/float64(bytesPerSec)*float64(time.Second))
			if wait := due - time.Since(start); wait > 0 {
				time.Sleep(wait)
			}
		}
	}
	h.Sum(sum[:0])
	return n, sum, err
}
