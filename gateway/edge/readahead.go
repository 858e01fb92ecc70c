package edge

import "sync"

// A plain-HTTP connection's wait for its next request is one read of the
// socket, as the bare fasthttp server's is. With ReduceMemoryUsage (an
// idle keep-alive connection holds no buffer) fasthttp waits on a one-byte
// read, then reads the rest of the request through a buffer it takes
// then: two reads of the socket a request. A one-byte read of a
// keylessConn that reads ahead reads whatever has arrived, up to
// readAheadSize, into a buffer from a pool, hands back the first byte and
// serves the rest to the reads that follow; the buffer goes back to the
// pool once they took it all, so an idle connection still holds none.
// Over TLS the record layer reads in large pieces on its own: no read
// ahead there.

// readAheadSize is the most a read ahead takes: fasthttp's read buffer.
const readAheadSize = 4096

var readAheadPool = sync.Pool{New: func() any { return new([readAheadSize]byte) }}

// readAhead holds what a one-byte read took past its byte.
type readAhead struct {
	buf  *[readAheadSize]byte // nil when nothing is held
	r, w int                  // buf[r:w] is held
}

// read reads p from what is held, else through read; a one-byte read
// reads ahead.
func (a *readAhead) read(p []byte, read func([]byte) (int, error)) (int, error) {
	if a.buf != nil {
		n := copy(p, a.buf[a.r:a.w])
		if a.r += n; a.r == a.w {
			readAheadPool.Put(a.buf)
			a.buf = nil
		}
		return n, nil
	}
	if len(p) != 1 {
		return read(p)
	}
	b := readAheadPool.Get().(*[readAheadSize]byte)
	n, err := read(b[:])
	if n > 0 {
		p[0] = b[0]
	}
	if n <= 1 {
		readAheadPool.Put(b)
		return n, err
	}
	// An error with the bytes (the peer closed after them) comes again
	// from the socket once they are taken.
	a.buf, a.r, a.w = b, 1, n
	return 1, nil
}
