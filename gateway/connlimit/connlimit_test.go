package connlimit

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/netip"
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

func listen(t *testing.T, o Options) *Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if o.Refusal == nil {
		o.Refusal = func(dst []byte) []byte {
			return append(dst, "HTTP/1.1 429 Too Many Requests\r\nContent-Length: 2\r\nConnection: close\r\n\r\nno"...)
		}
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
	refused := make(chan struct{}, 10)
	l := listen(t, Options{PerPeer: 2, OnRefuse: func() { refused <- struct{}{} }})
	a, _ := dial(t, l), dial(t, l)
	waitOpen(t, l, 2)
	over := dial(t, l)
	// The client sends its request before reading: the answer must still
	// reach it whole (no reset for unread bytes).
	_, _ = io.WriteString(over, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	_ = over.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(over), nil)
	if err != nil {
		t.Fatalf("the third connection: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 429 || string(body) != "no" {
		t.Fatalf("%d %q, want the refusal", resp.StatusCode, body)
	}
	select {
	case <-refused:
	case <-time.After(5 * time.Second):
		t.Fatal("OnRefuse not called")
	}
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
