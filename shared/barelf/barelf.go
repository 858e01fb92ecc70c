// Package barelf refuses at once a request head whose blank line ends in a
// bare LF, which fasthttp's server would otherwise hold until its read
// timeout.
//
// fasthttp accepts a bare LF at the end of a header line, but takes a head
// as ended only where the block holds CRLFCRLF: so that a peer that knows
// only that terminator cannot frame the stream otherwise, a bare-LF blank
// line ("\n\n", "\r\n\n", "\n\r\n") makes it wait for more bytes. A client
// that sends "GET / HTTP/1.1\nHost: x\n\n" and waits gets no answer for 30
// seconds and holds a connection and its buffer all that time. A Conn
// watches the head of each request for such a blank line; when the server
// then asks for more bytes before it has answered anything, the head cannot
// end well, and the read fails with ErrBareLF, which the server answers
// with its 400.
//
// The Conn knows where a request begins only from the server's writes: a
// head is looked for in the bytes read after a write (or at the start),
// when they begin with a method ("GET "). A client that pipelines requests
// can have the bytes after a write begin inside a request; the look then
// stops at the first line that is not a method, and the cost of a mistake
// is a 400 to a head that began like a method and held a bare-LF blank
// line: a stream fasthttp would have held anyway.
package barelf

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync/atomic"
)

// ErrBareLF is the read error of a connection whose request head has a
// blank line ending in a bare LF and that the server read on from.
var ErrBareLF = errors.New("request head has a blank line ending in a bare LF")

// scan states.
const (
	method = iota // at a request's start: [A-Z]+ then a space
	head          // in the head: looking for its blank line
	done          // the head ended with CRLFCRLF, or this is no head
	bad           // a bare-LF blank line: the next read fails
)

// Conn is a net.Conn whose reads fail once the request head read holds a
// bare-LF blank line and the server, instead of answering, reads on.
type Conn struct {
	net.Conn
	wrote   atomic.Bool // the server wrote since the last read: a new request begins
	state   uint8
	methodN uint8 // method letters seen
	lineLen int   // bytes of the current line so far
	lineCR  bool  // the current line so far ends in CR
	lastCR  bool  // the line before ended in CRLF
}

// New wraps c.
func New(c net.Conn) *Conn { return &Conn{Conn: c} }

// Read reads and watches the head; it fails with ErrBareLF when the head
// read so far cannot end.
func (c *Conn) Read(p []byte) (int, error) {
	if c.wrote.Swap(false) {
		c.state, c.methodN, c.lineLen, c.lineCR, c.lastCR = method, 0, 0, false, false
	}
	if c.state == bad {
		return 0, ErrBareLF
	}
	n, err := c.Conn.Read(p)
	if n > 0 && c.state != done {
		c.scan(p[:n])
	}
	return n, err
}

// scan follows b, the next bytes of the stream.
func (c *Conn) scan(b []byte) {
	for c.state == method && len(b) > 0 {
		switch ch := b[0]; {
		case ch >= 'A' && ch <= 'Z' && c.methodN < 32:
			c.methodN++
			c.lineLen++
		case ch == ' ' && c.methodN > 0:
			c.state = head
			c.lineLen++
		default:
			c.state = done // not a request line: fasthttp decides
			return
		}
		b = b[1:]
	}
	for c.state == head && len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			c.lineLen += len(b)
			c.lineCR = b[len(b)-1] == '\r'
			return
		}
		length, cr := c.lineLen+i, c.lineCR
		if i > 0 {
			cr = b[i-1] == '\r'
		}
		switch {
		case length == 0: // "\n": a bare-LF blank line
			c.state = bad
		case length == 1 && cr && c.lastCR: // CRLFCRLF: the head ended well
			c.state = done
		case length == 1 && cr: // "\n\r\n": a CRLF blank line after a bare LF
			c.state = bad
		}
		c.lastCR = cr
		c.lineLen, c.lineCR = 0, false
		b = b[i+1:]
	}
}

// Write writes; the next read begins a new request.
func (c *Conn) Write(p []byte) (int, error) {
	c.wrote.Store(true)
	return c.Conn.Write(p)
}

// ReadFrom keeps the wrapped connection's own ReadFrom (sendfile for a
// file body).
func (c *Conn) ReadFrom(r io.Reader) (int64, error) {
	c.wrote.Store(true)
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(writerOnly{c.Conn}, r)
}

// NetConn is the wrapped connection, for code that looks for a wrapper
// further down (idleconn.Stream under TLS).
func (c *Conn) NetConn() net.Conn { return c.Conn }

// writerOnly hides every method but Write (from io.Copy).
type writerOnly struct{ io.Writer }

// Listener wraps every accepted connection in a Conn.
type Listener struct{ net.Listener }

// NewListener wraps ln.
func NewListener(ln net.Listener) net.Listener { return Listener{ln} }

// Accept accepts and wraps.
func (l Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return New(c), nil
}
