// Package connlimit bounds the connections one TCP peer holds open at once,
// at the listener: a connection over the bound is answered with a canned
// HTTP response and closed before the server gives it a goroutine, a read
// buffer or a request. fasthttp's own Server.MaxConnsPerIP does the same
// with a plain-text 429, and counts per IPv6 address where one client holds
// a whole /64.
package connlimit

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Options configures a Listener.
type Options struct {
	// PerPeer is the most connections one peer (an IPv4 address, an IPv6
	// /64) holds open at once. Required.
	PerPeer int
	// Exempt reports whether a peer is never bounded: a trusted proxy
	// carries many clients on its connections. It is asked on every accept,
	// so a reload that changes it applies to the next connection. nil: no
	// peer is exempt.
	Exempt func(netip.Addr) bool
	// Refusal appends the answer to a connection over the bound to dst: a
	// whole HTTP response that closes the connection. Required.
	Refusal func(dst []byte) []byte
	// OnRefuse is called once for each refused connection (a metric); nil:
	// nothing is called.
	OnRefuse func()
	// Linger bounds the time spent on a refused connection: writing the
	// answer, then reading what the client sent so that closing does not
	// reset the connection before the client has read the answer. Default
	// 1s.
	Linger time.Duration
	// MaxRefusing bounds the refused connections lingering at once; past
	// it a refused connection is closed at once, unanswered, so that a
	// flood of refusals costs no more than this many goroutines. Default
	// 256.
	MaxRefusing int
}

// Listener is a net.Listener that bounds the connections per peer.
type Listener struct {
	net.Listener
	o        Options
	mu       sync.Mutex
	open     map[netip.Addr]int // by peer (IPv6: the /64's first address)
	refusing atomic.Int64
	wg       sync.WaitGroup // the lingering refusals
}

// NewListener wraps ln.
func NewListener(ln net.Listener, o Options) (*Listener, error) {
	if o.PerPeer <= 0 {
		return nil, errors.New("connlimit: PerPeer must be positive")
	}
	if o.Refusal == nil {
		return nil, errors.New("connlimit: Refusal required")
	}
	if o.Exempt == nil {
		o.Exempt = func(netip.Addr) bool { return false }
	}
	if o.OnRefuse == nil {
		o.OnRefuse = func() {}
	}
	if o.Linger <= 0 {
		o.Linger = time.Second
	}
	if o.MaxRefusing <= 0 {
		o.MaxRefusing = 256
	}
	return &Listener{Listener: ln, o: o, open: make(map[netip.Addr]int)}, nil
}

// Accept returns the next connection within the bound; the ones over it are
// answered and closed on the way.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr, ok := peerOf(c)
		if !ok || l.o.Exempt(addr) {
			return c, nil
		}
		key := bucket(addr)
		if l.admit(key) {
			return &conn{Conn: c, l: l, key: key}, nil
		}
		l.o.OnRefuse()
		l.refuse(c)
	}
}

// Close closes the listener and waits for the lingering refusals.
func (l *Listener) Close() error {
	err := l.Listener.Close()
	l.wg.Wait()
	return err
}

// Open is the number of bounded connections open now from addr's peer.
func (l *Listener) Open(addr netip.Addr) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open[bucket(addr.Unmap())]
}

func (l *Listener) admit(key netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.open[key]
	if n >= l.o.PerPeer {
		return false
	}
	l.open[key] = n + 1
	return true
}

func (l *Listener) release(key netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := l.open[key]; n > 1 {
		l.open[key] = n - 1
	} else {
		delete(l.open, key) // an idle peer costs nothing
	}
}

// refuse answers c and closes it, in a goroutine of its own: Accept never
// waits on a client.
func (l *Listener) refuse(c net.Conn) {
	if l.refusing.Add(1) > int64(l.o.MaxRefusing) {
		l.refusing.Add(-1)
		_ = c.Close()
		return
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer l.refusing.Add(-1)
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(l.o.Linger))
		var buf [512]byte
		if _, err := c.Write(l.o.Refusal(buf[:0])); err != nil {
			return
		}
		// Half-close, then read until the client closes or the linger
		// ends: closing with unread request bytes would send a reset,
		// and the client could lose the answer with it.
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		_, _ = io.CopyN(io.Discard, c, 64<<10)
	}()
}

// peerOf is the connection's peer address, IPv4-mapped addresses unmapped.
func peerOf(c net.Conn) (netip.Addr, bool) {
	a, ok := c.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return netip.Addr{}, false
	}
	return a.AddrPort().Addr().Unmap(), true
}

// bucket is the address for IPv4 and its /64 for IPv6, as the failed-key
// throttle counts: one client holds a whole /64.
func bucket(a netip.Addr) netip.Addr {
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.Addr()
	}
	return a
}

// conn is a bounded connection: its Close gives its place back, once.
type conn struct {
	net.Conn
	l      *Listener
	key    netip.Addr
	closed atomic.Bool
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	if c.closed.CompareAndSwap(false, true) {
		c.l.release(c.key)
	}
	return err
}

// ReadFrom keeps the TCP connection's own (large writes, sendfile): the
// report downloads go through it.
func (c *conn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}
