package connlimit

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestBucket(t *testing.T) {
	for _, tc := range []struct{ a, want string }{
		{"192.0.2.7", "192.0.2.7"},
		{"2001:db8:1:2:aaaa::1", "2001:db8:1:2::"},
		{"2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::"}, // the same /64
		{"2001:db8:1:3::1", "2001:db8:1:3::"},
	} {
		if got := bucket(netip.MustParseAddr(tc.a)); got != netip.MustParseAddr(tc.want) {
			t.Errorf("bucket(%s) = %s, want %s", tc.a, got, tc.want)
		}
	}
}

// serve accepts on l and reads each accepted connection until the client
// closes it, then closes it as a server does.
func serve(t *testing.T, l *Listener) {
	t.Helper()
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_, _ = io.Copy(io.Discard, c)
			}()
		}
	}()
}

// The tests' time spent on a refused connection and bound on the refusals
// lingering at once.
const (
	testLinger      = time.Second
	testMaxRefusing = 256
)

// listen serves a Listener of o on a free port; the options a test leaves
// zero get valid values (a total of 1000, a 429 refusal, testLinger and
// testMaxRefusing).
func listen(t *testing.T, o Options) *Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if o.Total == nil {
		o.Total = total(t, 1000)
	}
	if o.Refusal == nil {
		o.Refusal = func(dst []byte, _ Reason) []byte {
			return append(dst, "HTTP/1.1 429 Too Many Requests\r\nContent-Length: 2\r\nConnection: close\r\n\r\nno"...)
		}
	}
	if o.Linger == 0 {
		o.Linger = testLinger
	}
	if o.MaxRefusing == 0 {
		o.MaxRefusing = testMaxRefusing
	}
	l, err := NewListener(ln, o)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, l)
	return l
}

func dial(t *testing.T, l *Listener) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitOpen waits until the listener counts n connections of 127.0.0.1.
func waitOpen(t *testing.T, l *Listener, n int) {
	t.Helper()
	lo := netip.MustParseAddr("127.0.0.1")
	for deadline := time.Now().Add(5 * time.Second); l.Open(lo) != n; {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections counted, want %d", l.Open(lo), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRefusesOverTheBound(t *testing.T) {
	refused := make(chan Reason, 10)
	l := listen(t, Options{PerPeer: 2, OnRefuse: func(r Reason) { refused <- r }})
	a, _ := dial(t, l), dial(t, l)
	waitOpen(t, l, 2)
	over := dial(t, l)
	// The client sends its request before reading: the answer must still
	// reach it whole (no reset for unread bytes).
	_, _ = io.WriteString(over, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	_ = over.SetReadDeadline(time.Now().Add(5 * time.Second))
	expectRefusal(t, over, "the third connection")
	expectReason(t, refused, Open)
	// Closing one gives its place back.
	a.Close()
	waitOpen(t, l, 1)
	dial(t, l)
	waitOpen(t, l, 2)
}

func TestExemptPeerIsNotCounted(t *testing.T) {
	l := listen(t, Options{PerPeer: 1, Exempt: func(a netip.Addr) bool { return a == netip.MustParseAddr("127.0.0.1") }})
	for range 5 {
		c := dial(t, l)
		_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if n, err := c.Read(make([]byte, 1)); n > 0 || !isTimeout(err) {
			t.Fatalf("an exempt peer's connection was answered or closed: %d %v", n, err)
		}
	}
	if n := l.Open(netip.MustParseAddr("127.0.0.1")); n != 0 {
		t.Fatalf("%d exempt connections counted", n)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// expectRefusal reads the refusal from c.
func expectRefusal(t *testing.T, c net.Conn, what string) {
	t.Helper()
	// The refusal answers the client's request, once it has begun.
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%s: %v, want the refusal", what, err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 429 || string(body) != "no" {
		t.Fatalf("%s: %d %q, want the refusal", what, resp.StatusCode, body)
	}
}

// expectAdmitted checks that c is held open by the server: no answer, no
// close.
func expectAdmitted(t *testing.T, c net.Conn, what string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if n, err := c.Read(make([]byte, 1)); n > 0 || !isTimeout(err) {
		t.Fatalf("%s was answered or closed: %d %v", what, n, err)
	}
}

func expectReason(t *testing.T, refused <-chan Reason, want Reason) {
	t.Helper()
	select {
	case r := <-refused:
		if r != want {
			t.Fatalf("refused for %s, want %s", r, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("OnRefuse not called")
	}
}

// clock is a settable Options.Now.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *clock) Advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// dialFrom dials l from the loopback address src.
func dialFrom(t *testing.T, l *Listener, src string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A peer that opens connections faster than NewPerSecond is refused, even
// though it closes each one and never holds more than one; another peer
// opening its first at the same moment is not; the bound admits one more
// every 1/NewPerSecond.
func TestRefusesOverTheRate(t *testing.T) {
	clk := &clock{now: time.Unix(1_000_000, 0)}
	refused := make(chan Reason, 10)
	l := listen(t, Options{PerPeer: 100, NewPerSecond: 4, Now: clk.Now, OnRefuse: func(r Reason) { refused <- r }})
	for i := range 4 {
		c := dialFrom(t, l, "127.0.0.1")
		expectAdmitted(t, c, fmt.Sprintf("connection %d of the second", i+1))
		c.Close()
	}
	waitOpen(t, l, 0)
	expectRefusal(t, dialFrom(t, l, "127.0.0.1"), "the fifth connection in the same second")
	expectReason(t, refused, Rate)
	expectAdmitted(t, dialFrom(t, l, "127.0.0.2"), "another peer's first connection")

	clk.Advance(250 * time.Millisecond) // one interval: one more
	expectAdmitted(t, dialFrom(t, l, "127.0.0.1"), "the connection one interval later")
	expectRefusal(t, dialFrom(t, l, "127.0.0.1"), "the next one at the same moment")
	expectReason(t, refused, Rate)
	clk.Advance(time.Second) // a whole second: the full burst again
	for i := range 4 {
		expectAdmitted(t, dialFrom(t, l, "127.0.0.1"), fmt.Sprintf("connection %d a second later", i+1))
	}
}

// A connection refused for the open bound does not use up the rate.
func TestOpenRefusalDoesNotCountAgainstRate(t *testing.T) {
	clk := &clock{now: time.Unix(1_000_000, 0)}
	refused := make(chan Reason, 10)
	l := listen(t, Options{PerPeer: 1, NewPerSecond: 2, Now: clk.Now, OnRefuse: func(r Reason) { refused <- r }})
	held := dial(t, l)
	waitOpen(t, l, 1)
	for range 3 {
		expectRefusal(t, dial(t, l), "a connection over the open bound")
		expectReason(t, refused, Open)
	}
	held.Close()
	waitOpen(t, l, 0)
	expectAdmitted(t, dial(t, l), "the second connection of the second")
}

// A peer's state is dropped once it holds no connection and its rate has
// lapsed: a flood of peers passing through leaves nothing behind.
func TestIdlePeersAreForgotten(t *testing.T) {
	clk := &clock{now: time.Unix(1_000_000, 0)}
	l := listen(t, Options{PerPeer: 10, NewPerSecond: 10, Now: clk.Now})
	for _, src := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"} {
		c := dialFrom(t, l, src)
		expectAdmitted(t, c, src)
		c.Close()
	}
	for deadline := time.Now().Add(5 * time.Second); l.Open(netip.MustParseAddr("127.0.0.4")) != 0; {
		if time.Now().After(deadline) {
			t.Fatal("the connections were not released")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := l.Peers(); n != 3 {
		t.Fatalf("%d peers kept within the second of their connections, want 3 (their rate still counts)", n)
	}
	clk.Advance(2 * time.Second)
	expectAdmitted(t, dialFrom(t, l, "127.0.0.5"), "a new peer") // the accept sweeps
	if n := l.Peers(); n != 1 {
		t.Fatalf("%d peers kept, want 1 (the one with a connection open)", n)
	}
}

// asClient is a connection whose RemoteAddr is the client a header named.
type asClient struct {
	net.Conn
	client net.Addr
}

func (c asClient) RemoteAddr() net.Addr { return c.client }

// With Header, an exempt peer's connection is bounded by the client its
// header names, as a direct peer would be; a header that fails closes the
// connection; and Close ends the header reads still waiting.
func TestHeaderBoundsTheClientItNames(t *testing.T) {
	client := netip.MustParseAddr("198.51.100.7")
	refused := make(chan Reason, 10)
	l := listen(t, Options{PerPeer: 2, OnRefuse: func(r Reason) { refused <- r },
		Exempt: func(a netip.Addr) bool { return a == netip.MustParseAddr("127.0.0.1") },
		Header: func(c net.Conn) (net.Conn, error) {
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			var b [1]byte
			if _, err := io.ReadFull(c, b[:]); err != nil {
				return nil, err
			}
			if b[0] != 'h' {
				return nil, fmt.Errorf("no header: %q", b[:])
			}
			_ = c.SetReadDeadline(time.Time{})
			return asClient{Conn: c, client: net.TCPAddrFromAddrPort(netip.AddrPortFrom(client, 4000))}, nil
		}})
	for range 2 {
		_, _ = io.WriteString(dial(t, l), "h")
	}
	for deadline := time.Now().Add(5 * time.Second); l.Open(client) != 2; {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections of the header's client counted, want 2", l.Open(client))
		}
		time.Sleep(5 * time.Millisecond)
	}
	over := dial(t, l)
	_, _ = io.WriteString(over, "hGET / HTTP/1.1\r\nHost: x\r\n\r\n")
	_ = over.SetReadDeadline(time.Now().Add(5 * time.Second))
	expectRefusal(t, over, "the header's client's third connection")
	expectReason(t, refused, Open)
	if n := l.Open(netip.MustParseAddr("127.0.0.1")); n != 0 {
		t.Fatalf("the proxy's own address counted %d connections", n)
	}

	bad := dial(t, l)
	_, _ = io.WriteString(bad, "x")
	_ = bad.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := bad.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("a connection whose header failed: %v, want closed", err)
	}

	dial(t, l) // sends nothing: its header read waits
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited on a header read (its deadline is 10s)")
	}
}

func total(t *testing.T, n int) *Total {
	t.Helper()
	tot, err := NewTotal(n)
	if err != nil {
		t.Fatal(err)
	}
	return tot
}

// Total bounds the connections of every listener that shares it, an
// exempt peer's included: past it a connection is closed at once,
// unanswered, and counted as Over; closing one gives its place back.
func TestTotalBoundsEveryConnection(t *testing.T) {
	if _, err := NewTotal(0); err == nil {
		t.Fatal("NewTotal(0) accepted")
	}
	tot := total(t, 2)
	refused := make(chan Reason, 10)
	exempt := func(a netip.Addr) bool { return a == netip.MustParseAddr("127.0.0.1") }
	a := listen(t, Options{Total: tot, PerPeer: 10, Exempt: exempt, OnRefuse: func(r Reason) { refused <- r }})
	b := listen(t, Options{Total: tot, PerPeer: 10, OnRefuse: func(r Reason) { refused <- r }})
	held := dial(t, a) // exempt, counted all the same
	dial(t, b)
	for deadline := time.Now().Add(5 * time.Second); tot.Open() != 2; {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections counted, want 2", tot.Open())
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, l := range []*Listener{a, b} {
		over := dial(t, l)
		_ = over.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := over.Read(make([]byte, 1)); n > 0 || err == nil || isTimeout(err) {
			t.Fatalf("a connection past the total: %d %v, want closed at once", n, err)
		}
		expectReason(t, refused, Over)
	}
	held.Close()
	for deadline := time.Now().Add(5 * time.Second); tot.Open() != 1; {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections counted after a close, want 1", tot.Open())
		}
		time.Sleep(5 * time.Millisecond)
	}
	c := dial(t, b)
	_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if n, err := c.Read(make([]byte, 1)); n > 0 || !isTimeout(err) {
		t.Fatalf("a connection within the total again: %d %v, want held", n, err)
	}
}

// TestNewListenerRefusesZeros: the listener fills in no default of its
// own: a zero linger or bound on lingering refusals is refused with an
// error that names it, as a zero PerPeer or a missing Total are.
func TestNewListenerRefusesZeros(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	good := Options{Total: total(t, 10), PerPeer: 1, Linger: testLinger, MaxRefusing: testMaxRefusing}
	if _, err := NewListener(ln, good); err != nil {
		t.Fatalf("valid options refused: %v", err)
	}
	for name, zero := range map[string]func(o *Options){
		"PerPeer":     func(o *Options) { o.PerPeer = 0 },
		"Total":       func(o *Options) { o.Total = nil },
		"Linger":      func(o *Options) { o.Linger = 0 },
		"MaxRefusing": func(o *Options) { o.MaxRefusing = 0 },
	} {
		o := good
		zero(&o)
		_, err := NewListener(ln, o)
		switch {
		case err == nil:
			t.Errorf("%s zero: accepted", name)
		case !strings.Contains(err.Error(), name):
			t.Errorf("%s zero: %q does not name it", name, err)
		}
	}
}
