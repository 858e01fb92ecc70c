// Package idleconn bounds a connection's reads and writes by progress
// rather than by a deadline on the whole exchange: a streamed body of any
// size may take as long as it needs while bytes keep moving, and a peer
// that stops reading (or sending) for Idle is cut off.
//
// fasthttp has no idle timeout for a response being written or a streamed
// body being read: its ReadTimeout and WriteTimeout are set once, before
// the whole answer. A Conn leaves a deadline its caller set alone (so those
// bounds hold as before for ordinary answers) and gives every read or write
// made with no deadline in force a fresh one of Idle. A server handler that
// streams lifts the server's write deadline with Stream; a client that
// streams makes its call with no read deadline.
package idleconn

import (
	"io"
	"net"
	"sync/atomic"
	"time"
)

// Options tune a Conn.
type Options struct {
	// Idle bounds each read or write made with no deadline set by the
	// caller: past it with no byte moved it fails with a timeout. Zero
	// leaves such operations unbounded.
	Idle time.Duration
	// FirstByte, when set, bounds instead the wait for the first byte read
	// after a write (the start of a backend's answer to a request), so that
	// a call waits no longer for its answer to begin than a non-streamed
	// call would. Zero means Idle.
	FirstByte time.Duration
}

// Conn is a net.Conn whose reads and writes without a caller's deadline are
// bounded by progress.
type Conn struct {
	net.Conn
	o Options
	// readSet and writeSet: the caller set a deadline, which stands.
	readSet, writeSet atomic.Bool
	// answering: written to since the last byte read.
	answering atomic.Bool
}

// New wraps c.
func New(c net.Conn, o Options) *Conn {
	if o.FirstByte <= 0 {
		o.FirstByte = o.Idle
	}
	return &Conn{Conn: c, o: o}
}

// Read reads, under the caller's deadline or a fresh one.
func (c *Conn) Read(p []byte) (int, error) {
	if c.o.Idle > 0 && !c.readSet.Load() {
		d := c.o.Idle
		if c.answering.Load() {
			d = c.o.FirstByte
		}
		if err := c.Conn.SetReadDeadline(time.Now().Add(d)); err != nil {
			return 0, err
		}
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.answering.Store(false)
	}
	return n, err
}

// Write writes, under the caller's deadline or a fresh one for each call
// (a caller such as bufio.Writer writes a long body in buffer-sized calls).
func (c *Conn) Write(p []byte) (int, error) {
	if c.o.Idle > 0 && !c.writeSet.Load() {
		if err := c.Conn.SetWriteDeadline(time.Now().Add(c.o.Idle)); err != nil {
			return 0, err
		}
	}
	c.answering.Store(true)
	return c.Conn.Write(p)
}

// copyChunk is how much of a body ReadFrom hands the wrapped connection
// under one deadline: a reader slower than copyChunk per Idle is cut.
const copyChunk = 32 << 10

// ReadFrom keeps what the wrapped connection's own ReadFrom does (large
// writes, sendfile from a file) while bounding each copyChunk by Idle.
// Without it, bufio.Writer would copy a body through its small buffer in
// small writes, which a small receive window turns into retransmissions.
func (c *Conn) ReadFrom(r io.Reader) (int64, error) {
	rf, ok := c.Conn.(io.ReaderFrom)
	if !ok {
		return io.Copy(writerOnly{c}, r)
	}
	if c.o.Idle <= 0 || c.writeSet.Load() {
		return rf.ReadFrom(r)
	}
	// A *io.LimitedReader is unwrapped so that the file inside stays
	// visible to sendfile.
	src, left := r, int64(-1)
	if lr, ok := r.(*io.LimitedReader); ok {
		src, left = lr.R, lr.N
		defer func() { lr.N = left }()
	}
	var total int64
	for left != 0 {
		if err := c.Conn.SetWriteDeadline(time.Now().Add(c.o.Idle)); err != nil {
			return total, err
		}
		c.answering.Store(true)
		chunk := int64(copyChunk)
		if left > 0 {
			chunk = min(chunk, left)
		}
		n, err := rf.ReadFrom(&io.LimitedReader{R: src, N: chunk})
		total += n
		if left > 0 {
			left -= n
		}
		if err != nil || n < chunk { // an error, or src is at its end
			return total, err
		}
	}
	return total, nil
}

// writerOnly hides every method of a Conn but Write (from io.Copy).
type writerOnly struct{ io.Writer }

// SetDeadline sets both deadlines; the zero time hands both back to Idle.
func (c *Conn) SetDeadline(t time.Time) error {
	c.readSet.Store(!t.IsZero())
	c.writeSet.Store(!t.IsZero())
	return c.Conn.SetDeadline(t)
}

// SetReadDeadline sets the read deadline; the zero time hands reads back
// to Idle.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.readSet.Store(!t.IsZero())
	return c.Conn.SetReadDeadline(t)
}

// SetWriteDeadline sets the write deadline; the zero time hands writes
// back to Idle.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.writeSet.Store(!t.IsZero())
	return c.Conn.SetWriteDeadline(t)
}

// Listener wraps every accepted connection in a Conn.
type Listener struct {
	net.Listener
	o Options
}

// NewListener wraps ln.
func NewListener(ln net.Listener, o Options) *Listener { return &Listener{Listener: ln, o: o} }

// Accept accepts the next connection and wraps it.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return New(c, l.o), nil
}

// handlerCtx is what Stream needs of a server handler's context; a
// *fasthttp.RequestCtx has both.
type handlerCtx interface {
	Conn() net.Conn
	SetWriteDeadline(time.Time) error
}

// Stream lifts the server's whole-answer write deadline from the answer
// ctx is about to write, when its connection is a Conn: each write of it is
// then bounded by Idle instead. On any other connection the server's
// deadline stays, so an answer is never left unbounded. It reports whether
// it lifted the deadline.
//
// The Conn may lie under other wrappers (TLS, whose records are what it
// bounds): each that offers NetConn, as *tls.Conn does, is looked through.
// A deadline set on a wrapper reaches the Conn beneath.
func Stream(ctx handlerCtx) bool {
	if !under(ctx.Conn()) {
		return false
	}
	return ctx.SetWriteDeadline(time.Time{}) == nil
}

// under reports whether c is a Conn or wraps one.
func under(c net.Conn) bool {
	for range 8 { // a handful of wrappers at most; never a loop
		if _, ok := c.(*Conn); ok {
			return true
		}
		w, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return false
		}
		c = w.NetConn()
	}
	return false
}
