package redisconn

import (
	"context"
	"errors"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// conns watches the limiter client's connections at the socket, so that a
// caller about to call Redis silent judges by what went over the wire, not
// by when the gateway's goroutines got a core: a go-redis dial hook wraps
// each connection and notes when a write to Redis completed and when a read
// returned bytes. Redis is silent when a connection has waited for an
// answer (written after its last read) for a caller's timeout on the
// node's on-time clock (onTime: lateness.go; time the node ran late is not
// counted), no connection has read a byte since that write, and no reply
// is waiting unread in its socket buffer (peeked, never read; for TLS, the
// encrypted bytes of the record). A request written late (a sender that
// got its core late) is not yet waited on; a reply that arrived while the
// gateway was not scheduled is waiting, not missing.
type conns struct {
	clock Clock
	// onTime maps a reading of clock to the on-time clock (nil: the same).
	onTime   func(int64) int64
	lastRead atomic.Int64 // clock's ns: the latest read that returned bytes, on any connection
	mu       sync.Mutex
	set      map[*watchedConn]waiter // nil: cannot be peeked
	// lateReads counts reads that timed out with Redis' reply already
	// waiting in the socket buffer and could not take it (a read that
	// timed out so takes what waits: see Read): the wire deadline passed
	// while the gateway was not scheduled to read, not while Redis was
	// silent. (go-redis drops such a connection as for any timeout; the
	// count is how the round trip learns whose lateness it was.)
	lateReads atomic.Int64
	// lateWrites counts writes that reached the socket only after their
	// deadline had passed and wrote nothing: the request never left the
	// gateway, and Redis was not asked.
	lateWrites atomic.Int64
	// answered, when set (before the first dial), is told how long each
	// answer took on the on-time clock: from a request's write to the first
	// read that returned bytes after it.
	answered func(time.Duration)
	// beforeRead, when set (tests only, before the first dial), runs
	// before each read: a reader that got its core late.
	beforeRead func()
	// beforeWrite, when set (tests only, before the first dial), runs
	// before each write: a writer that got its core late.
	beforeWrite func()
}

// watch adds c as a hook to the client, or to every node of a Cluster.
// It must be called before the client dials.
func (c *conns) watch(client redis.UniversalClient) {
	c.lastRead.Store(math.MinInt64 / 2)
	c.set = make(map[*watchedConn]waiter)
	switch cl := client.(type) {
	case *redis.ClusterClient:
		cl.OnNewNode(func(n *redis.Client) { n.AddHook(c) })
	case *redis.Client:
		cl.AddHook(c)
	}
}

func (c *conns) now() int64 { return c.clock.Nanotime() }

// on is wall (a reading of clock) on the on-time clock.
func (c *conns) on(wall int64) int64 {
	if c.onTime == nil {
		return wall
	}
	return c.onTime(wall)
}

// DialHook wraps each new connection.
func (c *conns) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil {
			return conn, err
		}
		w := &watchedConn{Conn: conn, w: c}
		var out net.Conn = w
		// A plain socket keeps offering go-redis its raw handle. A TLS
		// connection does not (go-redis deliberately does not look into
		// TLS), but its socket is peeked too: encrypted bytes waiting are
		// Redis' answer as surely as plaintext. A connection that is no
		// socket tells what waits itself (a simulated Redis').
		if sc, ok := conn.(syscall.Conn); ok {
			if raw, err := sc.SyscallConn(); err == nil {
				w.wait = socket{raw}
			}
			out = watchedSysConn{w, sc}
		} else if wc, ok := conn.(waiter); ok {
			w.wait = wc
		} else if under, ok := conn.(interface{ NetConn() net.Conn }); ok {
			if sc, ok := under.NetConn().(syscall.Conn); ok {
				if raw, err := sc.SyscallConn(); err == nil {
					w.wait, w.sealed = socket{raw}, true
				}
			}
		}
		c.mu.Lock()
		c.set[w] = w.wait
		c.mu.Unlock()
		return out, nil
	}
}

// ProcessHook leaves commands as they are.
func (c *conns) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

// ProcessPipelineHook leaves pipelines as they are.
func (c *conns) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// silent reports whether Redis has been silent for timeout on the on-time
// clock at now (see conns).
func (c *conns) silent(timeout time.Duration) bool {
	now := c.on(c.now())
	last := c.lastRead.Load()
	c.mu.Lock()
	defer c.mu.Unlock()
	waited := false
	for w, wait := range c.set {
		wrote := w.wrote.Load()
		if wrote == 0 || wrote <= w.read.Load() {
			continue // nothing asked, or answered (at least in part)
		}
		if wait != nil && wait.waiting() {
			return false // Redis answered; the gateway has not read it yet
		}
		if now-w.wroteOn.Load() >= int64(timeout) && last < wrote {
			waited = true
		}
	}
	return waited
}

// asked reports whether a connection was written to after its last read:
// a request Redis has not answered (at least in part) yet.
func (c *conns) asked() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for w := range c.set {
		if wrote := w.wrote.Load(); wrote != 0 && wrote > w.read.Load() {
			return true
		}
	}
	return false
}

// waiting reports whether a reply waits unread in a socket that was asked
// (written after its last read): Redis answered, the gateway has not read
// it yet.
func (c *conns) waiting() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for w, wait := range c.set {
		if wrote := w.wrote.Load(); wait == nil || wrote == 0 || wrote <= w.read.Load() {
			continue
		}
		if wait.waiting() {
			return true
		}
	}
	return false
}

// waiter tells whether bytes wait unread in a connection without reading
// them, and reads what waits without blocking, whatever the deadline: a
// socket (peek_*.go), or a connection that is none (a simulated Redis').
type waiter interface {
	waiting() bool
	readWaiting(p []byte) int
}

// socket is a socket's waiter.
type socket struct{ raw syscall.RawConn }

func (s socket) waiting() bool {
	waiting, _ := peek(s.raw)
	return waiting
}

func (s socket) readWaiting(p []byte) int { return readWaiting(s.raw, p) }

// watchedConn notes when writes completed and reads returned bytes.
type watchedConn struct {
	net.Conn
	w           *conns
	wait        waiter       // nil: cannot be peeked
	sealed      bool         // wait is a socket of TLS records: peeked, never read
	wrote, read atomic.Int64 // clock's ns; 0: never
	wroteOn     atomic.Int64 // the on-time clock at wrote
	writeBy     atomic.Int64 // clock's ns: the write deadline; 0: none
}

// SetDeadline notes the write deadline and sets both.
func (c *watchedConn) SetDeadline(t time.Time) error {
	c.noteWriteDeadline(t)
	return c.Conn.SetDeadline(t)
}

// SetWriteDeadline notes the write deadline and sets it.
func (c *watchedConn) SetWriteDeadline(t time.Time) error {
	c.noteWriteDeadline(t)
	return c.Conn.SetWriteDeadline(t)
}

func (c *watchedConn) noteWriteDeadline(t time.Time) {
	by := int64(0)
	if !t.IsZero() {
		by = max(c.w.now()+int64(time.Until(t)), 1) // the deadline on the conns' clock
	}
	c.writeBy.Store(by)
}

func (c *watchedConn) Write(p []byte) (int, error) {
	if c.w.beforeWrite != nil {
		c.w.beforeWrite()
	}
	by := c.writeBy.Load()
	late := by != 0 && c.w.now() >= by // the deadline passed before the gateway got to write
	n, err := c.Conn.Write(p)
	var ne net.Error
	if n == 0 && late && errors.As(err, &ne) && ne.Timeout() {
		c.w.lateWrites.Add(1)
	}
	if n > 0 {
		t := max(c.w.now(), 1)
		c.wroteOn.Store(c.w.on(t))
		c.wrote.Store(t)
	}
	return n, err
}

func (c *watchedConn) Read(p []byte) (int, error) {
	if c.w.beforeRead != nil {
		c.w.beforeRead()
	}
	n, err := c.Conn.Read(p)
	var ne net.Error
	if n == 0 && c.wait != nil && errors.As(err, &ne) && ne.Timeout() {
		if c.wait.waiting() {
			// Redis answered in time and the node read late: the reply is
			// taken, not lost with the connection (its callers would be
			// refused with their decisions in the socket). TLS records are
			// read through TLS, with a moment more to read what waits (a
			// timeout does not break a TLS connection).
			if c.sealed {
				n, err = c.readSealed(p)
			} else {
				n = c.wait.readWaiting(p)
			}
			if n > 0 {
				err = nil
			} else {
				c.w.lateReads.Add(1)
				return 0, err
			}
		}
	}
	if n > 0 {
		t := max(c.w.now(), 1)
		if wrote := c.wrote.Load(); wrote > c.read.Load() && c.w.answered != nil {
			c.w.answered(time.Duration(c.w.on(t) - c.wroteOn.Load()))
		}
		c.read.Store(t)
		atomicMax(&c.w.lastRead, t)
	}
	return n, err
}

// sealedReadExtra is how long a TLS read that timed out with bytes
// waiting is given to read them.
const sealedReadExtra = 50 * time.Millisecond

// readSealed reads through TLS what waits in the socket after a read
// timed out, then restores an expired deadline (go-redis sets its own for
// the next command).
func (c *watchedConn) readSealed(p []byte) (int, error) {
	if err := c.Conn.SetReadDeadline(time.Now().Add(sealedReadExtra)); err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		err = nil
	}
	return n, err
}

func (c *watchedConn) Close() error {
	c.w.mu.Lock()
	delete(c.w.set, c)
	c.w.mu.Unlock()
	return c.Conn.Close()
}

// NetConn is the wrapped connection, for code that unwraps.
func (c *watchedConn) NetConn() net.Conn { return c.Conn }

// watchedSysConn is a watched plain socket: go-redis' own health checks
// keep its raw handle.
type watchedSysConn struct {
	*watchedConn
	sc syscall.Conn
}

func (c watchedSysConn) SyscallConn() (syscall.RawConn, error) { return c.sc.SyscallConn() }
