package edge

import (
	"io"
	"net"
	"sync/atomic"
	"time"
)

// A connection that has shown no valid key is closed sooner than a
// vendor's: until a request with a valid key has been served on it, every
// read deadline set on it (the keep-alive idle wait among them) is cut to
// keyless_idle_timeout from when it is set. A vendor's connection then
// idles for the server's idle timeout. keyless_idle_timeout is at least
// read_timeout, so reading a request's head is never cut.

// keylessListener wraps every accepted connection in a keylessConn, which
// reads ahead (readahead.go) when readAhead is set: the plain-HTTP
// listeners'.
type keylessListener struct {
	net.Listener
	idle      time.Duration
	readAhead bool
}

func (l *keylessListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &keylessConn{Conn: c, idle: l.idle, readAhead: l.readAhead}, nil
}

// keylessConn is a connection whose read deadlines are cut to idle until
// vendor is set.
type keylessConn struct {
	net.Conn
	idle      time.Duration
	vendor    atomic.Bool
	readAhead bool
	ahead     readAhead
}

// Read reads from the connection, through its read ahead when it has one.
func (c *keylessConn) Read(p []byte) (int, error) {
	if c.readAhead {
		return c.ahead.read(p, c.Conn.Read)
	}
	return c.Conn.Read(p)
}

func (c *keylessConn) cut(t time.Time) time.Time {
	if c.vendor.Load() {
		return t
	}
	if limit := time.Now().Add(c.idle); t.IsZero() || t.After(limit) {
		return limit
	}
	return t
}

func (c *keylessConn) SetReadDeadline(t time.Time) error { return c.Conn.SetReadDeadline(c.cut(t)) }

func (c *keylessConn) SetDeadline(t time.Time) error {
	if err := c.Conn.SetDeadline(t); err != nil {
		return err
	}
	return c.Conn.SetReadDeadline(c.cut(t))
}

// NetConn is the wrapped connection, for code that looks for a wrapper
// further down (idleconn.Stream).
func (c *keylessConn) NetConn() net.Conn { return c.Conn }

// ReadFrom keeps the wrapped connection's own (large writes, sendfile).
func (c *keylessConn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

// ShownKey marks c's connection as a vendor's: a request with a valid key
// is being served on it. The keylessConn lies under at most a few wrappers
// (TLS), each offering NetConn.
func ShownKey(c net.Conn) {
	for range 4 {
		if k, ok := c.(*keylessConn); ok {
			if !k.vendor.Load() {
				k.vendor.Store(true)
			}
			return
		}
		w, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return
		}
		c = w.NetConn()
	}
}
