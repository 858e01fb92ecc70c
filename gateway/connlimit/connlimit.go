// Package connlimit bounds, at the listener, the connections one TCP peer
// holds open at once and the new ones it opens a second: a connection over
// either bound is answered with a canned HTTP response, once its request has begun, and closed before the
// server gives it a goroutine, a read buffer or a request. fasthttp's own
// Server.MaxConnsPerIP bounds the open ones with a plain-text 429, counts
// per IPv6 address where one client holds a whole /64, and has no bound on
// the rate: a peer that closes each connection after one request (or whose
// every request is answered and closed, as a body refused unread is) costs
// an accept, a goroutine and a close each time, however few it holds.
package connlimit

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Total bounds the connections open at once across the listeners that
// share it: each costs memory whoever holds it (a goroutine, buffers, TLS
// state), and past the bound one more is closed at accept, unanswered.
type Total struct {
	max  int64
	open atomic.Int64
}

// NewTotal is a bound of max connections open at once.
func NewTotal(max int) (*Total, error) {
	if max <= 0 {
		return nil, errors.New("connlimit: the total bound must be positive")
	}
	return &Total{max: int64(max)}, nil
}

// Open is the number of connections the bound counts now.
func (t *Total) Open() int { return int(t.open.Load()) }

func (t *Total) take() bool {
	if t.open.Add(1) > t.max {
		t.open.Add(-1)
		return false
	}
	return true
}

func (t *Total) release() { t.open.Add(-1) }

// Options configures a Listener.
type Options struct {
	// Total bounds every connection the listener accepts, exempt peers'
	// and those whose Header is being read included. Required.
	Total *Total
	// PerPeer is the most connections one peer (an IPv4 address, an IPv6
	// /64) holds open at once. Required.
	PerPeer int
	// NewPerSecond is the most new connections one peer opens a second,
	// as many at once, then one every 1/NewPerSecond (GCRA). 0: no bound.
	NewPerSecond int
	// Exempt reports whether a peer is never bounded: a trusted proxy
	// carries many clients on its connections. It is asked on every accept,
	// so a reload that changes it applies to the next connection. nil: no
	// peer is exempt.
	Exempt func(netip.Addr) bool
	// Header, when set, reads from an exempt peer's connection who it
	// carries (a PROXY protocol header) and returns the connection as the
	// client's: its RemoteAddr is the address the bounds then apply to,
	// as to a direct peer (the peer's own address when the header names
	// no client). It runs at accept, in a goroutine of its own per
	// connection (the accept loop never waits on a peer), and must bound
	// its own time (a read deadline). An error closes the connection; the
	// caller counts it. nil: an exempt peer's connections are not bounded.
	Header func(net.Conn) (net.Conn, error)
	// Refusal appends the answer to a connection over a bound to dst: a
	// whole HTTP response that closes the connection. nil: a refused
	// connection is closed unanswered, as it must be under TLS, where the
	// client expects a handshake and cannot read a plaintext answer.
	Refusal func(dst []byte, over Reason) []byte
	// OnRefuse is called once for each refused connection with the bound
	// it was over (a metric); nil: nothing is called.
	OnRefuse func(Reason)
	// Now is the clock of NewPerSecond. Default time.Now.
	Now func() time.Time
	// Linger bounds the time spent on a refused connection: writing the
	// answer, then reading what the client sent so that closing does not
	// reset the connection before the client has read the answer.
	// Required.
	Linger time.Duration
	// MaxRefusing bounds the refused connections lingering at once; past
	// it a refused connection is closed at once, unanswered, so that a
	// flood of refusals costs no more than this many goroutines.
	// Required.
	MaxRefusing int
}

// Reason is the bound a refused connection was over.
type Reason int

const (
	// Open: its peer held PerPeer connections already.
	Open Reason = iota
	// Rate: its peer had opened NewPerSecond connections in the last second.
	Rate
	// Over: Total connections were open, whoever held them. It is closed at
	// once, unanswered: an answer would cost what the bound protects.
	Over
	// NumReasons is the number of reasons, for arrays indexed by Reason.
	NumReasons
)

func (r Reason) String() string {
	switch r {
	case Rate:
		return "rate"
	case Over:
		return "total"
	}
	return "open"
}

// Listener is a net.Listener that bounds the connections per peer.
type Listener struct {
	net.Listener
	o Options
	// interval is 1/NewPerSecond and tolerance (NewPerSecond-1) intervals:
	// a peer's next connection is admitted while its theoretical arrival
	// time is at most tolerance ahead of now. Both 0 without a rate bound.
	interval, tolerance time.Duration
	epoch               time.Time // the origin of peer.tat

	mu       sync.Mutex
	peers    map[netip.Addr]peer // by peer (IPv6: the /64's first address)
	swept    time.Duration       // when peers was last swept, since epoch
	refusing atomic.Int64
	wg       sync.WaitGroup // the lingering refusals and, with Header, the header reads and the accept loop

	// With Header, connections are accepted by a loop of their own (run),
	// which hands each admitted one, or the error that ended it, to Accept
	// through ready; closed ends the loop and the header reads.
	start   sync.Once
	ready   chan accepted
	closed  chan struct{}
	close   sync.Once
	pending map[net.Conn]struct{} // the headers being read, under mu: Close closes them
	ending  bool                  // under mu: Close has begun
}

// accepted is what the accept loop hands to Accept: a connection, or the
// error the underlying listener returned.
type accepted struct {
	c   net.Conn
	err error
}

// peer is one peer's state: its open connections and, with a rate bound,
// its theoretical arrival time (GCRA). A peer with no open connection whose
// tat has passed is as good as absent, and is deleted.
type peer struct {
	open int
	tat  time.Duration // since Listener.epoch
}

// NewListener wraps ln.
func NewListener(ln net.Listener, o Options) (*Listener, error) {
	if o.PerPeer <= 0 {
		return nil, errors.New("connlimit: PerPeer must be positive")
	}
	if o.Total == nil {
		return nil, errors.New("connlimit: Total is required")
	}
	if o.NewPerSecond < 0 {
		return nil, errors.New("connlimit: NewPerSecond must not be negative")
	}
	if o.Linger <= 0 {
		return nil, fmt.Errorf("connlimit: Linger %s must be positive", o.Linger)
	}
	if o.MaxRefusing <= 0 {
		return nil, fmt.Errorf("connlimit: MaxRefusing %d must be positive", o.MaxRefusing)
	}
	if o.Exempt == nil {
		o.Exempt = func(netip.Addr) bool { return false }
	}
	if o.OnRefuse == nil {
		o.OnRefuse = func(Reason) {}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	l := &Listener{Listener: ln, o: o, epoch: o.Now(), peers: make(map[netip.Addr]peer), ready: make(chan accepted), closed: make(chan struct{}), pending: make(map[net.Conn]struct{})}
	if o.NewPerSecond > 0 {
		l.interval = time.Second / time.Duration(o.NewPerSecond)
		l.tolerance = time.Duration(o.NewPerSecond-1) * l.interval
	}
	return l, nil
}

// Accept returns the next connection within the bound; the ones over it are
// answered and closed on the way.
func (l *Listener) Accept() (net.Conn, error) {
	if l.o.Header != nil {
		l.start.Do(func() {
			l.wg.Add(1)
			go l.run()
		})
		select {
		case a := <-l.ready:
			return a.c, a.err
		case <-l.closed:
			return nil, net.ErrClosed
		}
	}
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if !l.takeTotal(c) {
			continue
		}
		addr, ok := peerOf(c)
		if !ok || l.o.Exempt(addr) {
			return &conn{Conn: c, l: l}, nil
		}
		if b := l.bound(c, addr); b != nil {
			return b, nil
		}
	}
}

// takeTotal counts c against Total, or closes it when Total is reached.
func (l *Listener) takeTotal(c net.Conn) bool {
	if l.o.Total.take() {
		return true
	}
	_ = c.Close()
	l.o.OnRefuse(Over)
	return false
}

// bound is c, counted in Total already, counted against addr's bounds, or
// nil when it is over one: it is then answered and closed, and its place
// in Total given back.
func (l *Listener) bound(c net.Conn, addr netip.Addr) net.Conn {
	key := bucket(addr)
	refused, over := l.admit(key)
	if !refused {
		return &conn{Conn: c, l: l, key: key}
	}
	l.o.Total.release()
	l.o.OnRefuse(over)
	l.refuse(c, over)
	return nil
}

// run is the accept loop with Header: a direct peer's connection is
// bounded at once, an exempt peer's is handed to a goroutine that reads
// its header and bounds the client it names. It ends on Close or on an
// error of the underlying listener other than a timeout (which Accept
// returns, as the listener would).
func (l *Listener) run() {
	defer l.wg.Done()
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			var ne net.Error
			if !l.hand(accepted{err: err}) || !errors.As(err, &ne) || !ne.Timeout() {
				return
			}
			continue
		}
		if !l.takeTotal(c) {
			continue
		}
		addr, ok := peerOf(c)
		switch {
		case ok && l.o.Exempt(addr):
			l.mu.Lock()
			ending := l.ending
			if !ending {
				l.pending[c] = struct{}{}
			}
			l.mu.Unlock()
			if ending {
				l.o.Total.release()
				_ = c.Close()
				return
			}
			l.wg.Add(1)
			go l.readHeader(c)
		case !ok:
			if b := (&conn{Conn: c, l: l}); !l.hand(accepted{c: b}) {
				_ = b.Close()
				return
			}
		default:
			if b := l.bound(c, addr); b != nil && !l.hand(accepted{c: b}) {
				_ = b.Close()
				return
			}
		}
	}
}

// readHeader reads an exempt peer's header and bounds the client it names.
func (l *Listener) readHeader(c net.Conn) {
	defer l.wg.Done()
	hc, err := l.o.Header(c)
	l.mu.Lock()
	delete(l.pending, c)
	l.mu.Unlock()
	if err != nil {
		l.o.Total.release()
		_ = c.Close()
		return
	}
	addr, ok := peerOf(hc)
	if !ok {
		l.o.Total.release()
		_ = hc.Close()
		return
	}
	if b := l.bound(hc, addr); b != nil && !l.hand(accepted{c: b}) {
		_ = b.Close()
	}
}

// hand gives a to Accept, or reports false when the listener is closed.
func (l *Listener) hand(a accepted) bool {
	select {
	case l.ready <- a:
		return true
	case <-l.closed:
		return false
	}
}

// Close closes the listener and waits for the lingering refusals (and,
// with Header, for the accept loop and the header reads, each bounded by
// its own deadline).
func (l *Listener) Close() error {
	l.close.Do(func() { close(l.closed) })
	err := l.Listener.Close()
	l.mu.Lock()
	l.ending = true
	for c := range l.pending {
		_ = c.Close() // its header read fails at once, whatever deadline it set
	}
	l.mu.Unlock()
	l.wg.Wait()
	return err
}

// Open is the number of bounded connections open now from addr's peer.
func (l *Listener) Open(addr netip.Addr) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.peers[bucket(addr.Unmap())].open
}

// Peers is the number of peers the listener keeps state for: those with
// connections open, and those whose recent connections still count
// against NewPerSecond.
func (l *Listener) Peers() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.peers)
}

// admit counts a new connection of key's peer, or says which bound refuses
// it. A connection refused for the open bound does not count against the
// rate: the rate bounds what the server is given to serve.
func (l *Listener) admit(key netip.Addr) (refused bool, over Reason) {
	now := l.o.Now().Sub(l.epoch)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(now)
	p := l.peers[key]
	if p.open >= l.o.PerPeer {
		return true, Open
	}
	if l.interval > 0 {
		tat := max(p.tat, now)
		if tat-now > l.tolerance {
			return true, Rate
		}
		p.tat = tat + l.interval
	}
	p.open++
	l.peers[key] = p
	return false, 0
}

func (l *Listener) release(key netip.Addr) {
	now := l.o.Now().Sub(l.epoch)
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.peers[key]
	p.open--
	if p.open <= 0 && p.tat <= now {
		delete(l.peers, key) // an idle peer costs nothing
		return
	}
	l.peers[key] = p
}

// sweep deletes, at most once a second, the peers with no connection open
// whose rate state has lapsed: a peer that closed its last connection
// within the last second is kept until then, so the peers kept are at most
// those with connections open and those that opened one in the last second.
func (l *Listener) sweep(now time.Duration) {
	if l.interval == 0 || now-l.swept < time.Second {
		return
	}
	l.swept = now
	for k, p := range l.peers {
		if p.open <= 0 && p.tat <= now {
			delete(l.peers, k)
		}
	}
}

// refuse answers c and closes it, in a goroutine of its own: Accept never
// waits on a client.
func (l *Listener) refuse(c net.Conn, over Reason) {
	if l.o.Refusal == nil {
		_ = c.Close()
		return
	}
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
		// Answer once the client has begun its request: an answer before
		// it asked is, to an HTTP client (Go's among them), a broken
		// connection rather than a 429. A client that sends nothing is
		// closed unanswered when the linger ends.
		var buf [512]byte
		if _, err := c.Read(buf[:]); err != nil {
			return
		}
		if _, err := c.Write(l.o.Refusal(buf[:0], over)); err != nil {
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

// conn is a bounded connection: its Close gives its place back, once, in
// Total and (key valid: a bounded peer's) in its peer's count.
type conn struct {
	net.Conn
	l      *Listener
	key    netip.Addr
	closed atomic.Bool
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	if c.closed.CompareAndSwap(false, true) {
		c.l.o.Total.release()
		if c.key.IsValid() {
			c.l.release(c.key)
		}
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
