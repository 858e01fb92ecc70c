package edge

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// readCounter counts the reads of the connections it accepts, at the
// socket: the system calls a request costs the server.
type readCounter struct {
	net.Listener
	reads atomic.Int64
}

func (l *readCounter) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countedConn{Conn: c, reads: &l.reads}, nil
}

type countedConn struct {
	net.Conn
	reads *atomic.Int64
}

func (c *countedConn) Read(p []byte) (int, error) {
	c.reads.Add(1)
	return c.Conn.Read(p)
}

// TestOneReadPerKeepAliveRequest: over plain HTTP, a keep-alive
// connection's request, sent whole once the answer to the one before came,
// costs the server one read of its socket, as the bare fasthttp proxy's
// does: the server's wait for the next request (ReduceMemoryUsage waits on
// a one-byte read, holding no buffer) reads the request with it.
func TestOneReadPerKeepAliveRequest(t *testing.T) {
	const requests = 20
	rc := &readCounter{}
	e := startEdge(t, edgeOptions{plain: true, wrap: func(l net.Listener) net.Listener { rc.Listener = l; return rc }}, nil)
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range requests {
		if _, err := io.WriteString(c, "GET /me HTTP/1.1\r\nHost: gw\r\nX-API-Key: "+validKey+"\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		a, err := readAnswer(c, 5*time.Second)
		if err != nil || a.status != 200 {
			t.Fatalf("request %d: %d %v", i, a.status, err)
		}
	}
	// The last request's answer was written before its read ended: the
	// server is at most one read past it, waiting for the next request.
	if n := rc.reads.Load(); n > requests+1 {
		t.Fatalf("%d reads of the socket for %d requests, want at most %d (one a request)", n, requests, requests+1)
	}
}

// TestReadAheadKeepsPipelinedRequests: two requests sent in one write
// reach the server in one read; the one read ahead past the first request
// is served too, then the next request sent alone.
func TestReadAheadKeepsPipelinedRequests(t *testing.T) {
	e := startEdge(t, edgeOptions{plain: true}, nil)
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := "GET /me HTTP/1.1\r\nHost: gw\r\nX-API-Key: " + validKey + "\r\n\r\n"
	// A first request, so that the server waits for the next on its
	// one-byte read (a new connection's first request is read otherwise).
	for _, send := range []string{req, req + req, req} {
		if _, err := io.WriteString(c, send); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		for range strings.Count(send, "GET ") {
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("after %q: %v", send, err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("after %q: %d", send, resp.StatusCode)
			}
		}
		if br.Buffered() != 0 {
			t.Fatalf("%d bytes past the answers", br.Buffered())
		}
	}
}
