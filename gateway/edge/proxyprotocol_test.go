package edge

import (
	"crypto/tls"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"vendorgate/config"
)

// A v1 PROXY header that arrives in two TCP segments (a balancer whose
// write was split) is read whole within read_timeout, as HAProxy and nginx
// read theirs; the connection is then the client's.
func TestProxyHeaderSplitAcrossSegments(t *testing.T) {
	e := startEdge(t, edgeOptions{}, func(c *config.Gateway) {
		c.ProxyProtocol = true
		c.TrustedProxies = config.List{"127.0.0.1"}
	})
	c, err := net.DialTimeout("tcp", e.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "PROXY TCP4 198.51.100.7 "); err != nil {
		t.Fatal(err)
	}
	// The rest comes later, in a segment of its own (Go's TCP connections
	// send each write at once: no Nagle delay).
	time.Sleep(100 * time.Millisecond)
	if _, err := io.WriteString(c, "127.0.0.1 4000 443\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	tc := tls.Client(c, e.ca.ClientConfig(tlsName))
	if err := tc.Handshake(); err != nil {
		t.Fatalf("handshake after a split header: %v", err)
	}
	if got, err := servedAs(tc, validKey); err != nil || got != "198.51.100.7" {
		t.Fatalf("client %q, %v; want 198.51.100.7", got, err)
	}
	if n := e.metric(t, `vendorgate_gateway_tls_handshake_failures_total{reason="proxy_header"}`); n != 0 {
		t.Fatalf(`handshake_failures_total{reason="proxy_header"} %v, want 0`, n)
	}
}

// A trusted proxy's connection whose PROXY header is malformed, or absent,
// is closed before any handshake and counted as a handshake failure of its
// own reason, proxy_header, not other.
func TestMalformedProxyHeaderCounted(t *testing.T) {
	e := startEdge(t, edgeOptions{}, func(c *config.Gateway) {
		c.ProxyProtocol = true
		c.TrustedProxies = config.List{"127.0.0.1"}
	})
	bad := []string{
		"PROXY TCP4 198.51.100.7 127.0.0.1 4000\r\n",   // a field missing
		"PROXY TCP4 999.1.1.1 127.0.0.1 4000 443\r\n",  // not an address
		"PROXY TCP4 198.51.100.7 127.0.0.1 4000 443\n", // no CR
		"PROXY " + strings.Repeat("x", 120) + "\r\n",   // past 107 bytes
		"\x16\x03\x01\x00\x05hello, a ClientHello with no header",
	}
	for _, h := range bad {
		c, err := net.DialTimeout("tcp", e.addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(c, h)
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatalf("%q: answered", h)
		}
		c.Close()
	}
	if n := e.metric(t, `vendorgate_gateway_tls_handshake_failures_total{reason="proxy_header"}`); n != float64(len(bad)) {
		t.Fatalf(`handshake_failures_total{reason="proxy_header"} %v, want %d`, n, len(bad))
	}
	if n := e.metric(t, `vendorgate_gateway_tls_handshake_failures_total{reason="other"}`); n != 0 {
		t.Fatalf(`handshake_failures_total{reason="other"} %v, want 0`, n)
	}
}
