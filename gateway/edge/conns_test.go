package edge

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"vendorgate/config"
)

// handshakeFrom dials addr from the loopback address src and runs a TLS
// handshake with the edge's certificate.
func (e *testEdge) handshakeFrom(addr, src string) (*tls.Conn, error) {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	tc := tls.Client(c, e.ca.ClientConfig(tlsName))
	if err := tc.Handshake(); err != nil {
		c.Close()
		return nil, err
	}
	// A refusal under TLS is a close after the handshake only if the
	// bound runs after it: a read shows a close that came at once.
	_ = c.SetDeadline(time.Time{})
	return tc, nil
}

// servedAs sends GET /fast with key on c and returns the client address
// the handler saw, or an error if it was not served.
func servedAs(c net.Conn, key string) (string, error) {
	if _, err := io.WriteString(c, "GET /fast HTTP/1.1\r\nHost: "+tlsName+"\r\nX-API-Key: "+key+"\r\n\r\n"); err != nil {
		return "", err
	}
	a, err := readAnswer(c, 5*time.Second)
	if err != nil {
		return "", err
	}
	if a.status != 200 {
		return "", fmt.Errorf("%d %s", a.status, a.body)
	}
	host, _, err := net.SplitHostPort(strings.TrimPrefix(string(a.body), "client "))
	return host, err
}

// max_conns bounds every connection the gateway holds, from any number of
// addresses: past it a new connection is closed at accept, before its
// handshake, counted as refused for reason total; the gauge shows the
// connections open; closing one lets the next in.
func TestMaxConnsOverTLS(t *testing.T) {
	const bound = 3
	e := startEdge(t, edgeOptions{}, func(c *config.Gateway) { c.MaxConns = bound })
	held := make([]*tls.Conn, bound)
	for i := range held {
		tc, err := e.handshakeFrom(e.addr, "127.0.0."+string(rune('2'+i)))
		if err != nil {
			t.Fatalf("connection %d within max_conns: %v", i+1, err)
		}
		defer tc.Close()
		held[i] = tc
	}
	if n := e.metric(t, "vendorgate_gateway_connections_open"); n != bound {
		t.Fatalf("connections_open %v, want %d", n, bound)
	}
	if tc, err := e.handshakeFrom(e.addr, "127.0.0.9"); err == nil {
		tc.Close()
		t.Fatalf("a connection past max_conns %d (from a fresh address) finished its handshake", bound)
	}
	if n := e.metric(t, `vendorgate_gateway_connections_refused_total{reason="total"}`); n != 1 {
		t.Fatalf(`connections_refused_total{reason="total"} %v, want 1`, n)
	}
	held[0].Close()
	for deadline := time.Now().Add(5 * time.Second); e.metric(t, "vendorgate_gateway_connections_open") != bound-1; {
		if time.Now().After(deadline) {
			t.Fatal("a closed connection was not given back")
		}
		time.Sleep(10 * time.Millisecond)
	}
	tc, err := e.handshakeFrom(e.addr, "127.0.0.9")
	if err != nil {
		t.Fatalf("a connection within max_conns again: %v", err)
	}
	tc.Close()
}

// A connection that has shown no valid key is closed after
// keyless_idle_timeout idle; a vendor's, on which a valid key was served,
// idles for the server's idle timeout (60s).
func TestKeylessConnectionsClosedSooner(t *testing.T) {
	e := startEdge(t, edgeOptions{}, func(c *config.Gateway) {
		c.ReadTimeout, c.KeylessIdleTimeout = time.Second, time.Second
	})
	vendor, err := e.handshake(e.ca.ClientConfig(tlsName))
	if err != nil {
		t.Fatal(err)
	}
	defer vendor.Close()
	if got, err := servedAs(vendor, validKey); err != nil {
		t.Fatalf("a vendor's request: %q %v", got, err)
	}
	keyless, err := e.handshake(e.ca.ClientConfig(tlsName))
	if err != nil {
		t.Fatal(err)
	}
	defer keyless.Close()
	if _, err := io.WriteString(keyless, "GET /docs HTTP/1.1\r\nHost: "+tlsName+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if a, err := readAnswer(keyless, 10*time.Second); err != nil || a.status != 200 {
		t.Fatalf("GET /docs: %v %d", err, a.status)
	}
	// Closed by the gateway well before the 60s a vendor's connection
	// idles: a read sees the close (not this read's own deadline).
	start := time.Now()
	_ = keyless.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := keyless.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("a keyless connection idle %v: %v, want closed by the gateway", time.Since(start), err)
	}
	// The vendor's connection, idle longer than that, is still served.
	if got, err := servedAs(vendor, validKey); err != nil {
		t.Fatalf("the vendor's connection after the keyless one was closed: %q %v", got, err)
	}
}
