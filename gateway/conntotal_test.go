package gateway

import (
	"crypto/tls"
	"io"
	"net"
	"runtime"
	"testing"
	"time"
)

// max_conns bounds every connection the gateway holds, from any number of
// addresses: past it a new connection is closed at accept, before its
// handshake, counted as refused for reason total; the gauge shows the
// connections open; closing one lets the next in.
func TestMaxConnsOverTLS(t *testing.T) {
	const bound = 3
	b := newTestBackend(t)
	gw := startTLSGateway(t, b, func(o *Options) { o.Config.MaxConns = bound })
	held := make([]*tls.Conn, bound)
	for i := range held {
		tc, err := gw.handshakeFrom(gw.addr, "127.0.0."+string(rune('2'+i)))
		if err != nil {
			t.Fatalf("connection %d within max_conns: %v", i+1, err)
		}
		defer tc.Close()
		held[i] = tc
	}
	if n := metricValue(t, gw.testGateway, "vendorgate_gateway_connections_open"); n != bound {
		t.Fatalf("connections_open %v, want %d", n, bound)
	}
	if tc, err := gw.handshakeFrom(gw.addr, "127.0.0.9"); err == nil {
		tc.Close()
		t.Fatalf("a connection past max_conns %d (from a fresh address) finished its handshake", bound)
	}
	if n := metricValue(t, gw.testGateway, `vendorgate_gateway_connections_refused_total{reason="total"}`); n != 1 {
		t.Fatalf(`connections_refused_total{reason="total"} %v, want 1`, n)
	}
	held[0].Close()
	for deadline := time.Now().Add(5 * time.Second); metricValue(t, gw.testGateway, "vendorgate_gateway_connections_open") != bound-1; {
		if time.Now().After(deadline) {
			t.Fatal("a closed connection was not given back")
		}
		time.Sleep(10 * time.Millisecond)
	}
	tc, err := gw.handshakeFrom(gw.addr, "127.0.0.9")
	if err != nil {
		t.Fatalf("a connection within max_conns again: %v", err)
	}
	tc.Close()
}

// idleConnCost is the memory docs/configuration.md gives for an idle TLS
// connection at worst (max_conns): one that was served a documentation
// page and then idles.
const idleConnCost = 110 << 10

// N idle TLS connections, each served GET /docs, cost the process (heap
// and goroutine stacks, the test's own client ends included, so this is
// an upper bound on the gateway's share) at most the documented cost per
// connection × N.
func TestIdleConnectionCost(t *testing.T) {
	const n = 200
	b := newTestBackend(t)
	gw := startTLSGateway(t, b, func(o *Options) {
		o.Config.MaxConnsPerPeer = 4 * n
		o.Config.Docs.Rate = 4 * n
	})
	inUse := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse + m.StackInuse
	}
	// One connection first, so that what every connection shares (the
	// page rendered, pools filled, the TLS session keys) is in the base.
	warm, err := gw.handshake(gw.ca.ClientConfig(tlsName))
	if err != nil {
		t.Fatal(err)
	}
	defer warm.Close()
	docsOn := func(c net.Conn) {
		t.Helper()
		if _, err := io.WriteString(c, "GET /docs HTTP/1.1\r\nHost: "+tlsName+"\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		if a, err := readAnswer(c, 10*time.Second); err != nil || a.status != 200 {
			t.Fatalf("GET /docs: %v %d", err, a.status)
		}
	}
	docsOn(warm)
	base := inUse()
	conns := make([]*tls.Conn, n)
	for i := range conns {
		tc, err := gw.handshake(gw.ca.ClientConfig(tlsName))
		if err != nil {
			t.Fatalf("connection %d: %v", i+1, err)
		}
		defer tc.Close()
		docsOn(tc)
		conns[i] = tc
	}
	grew := int64(inUse()) - int64(base)
	t.Logf("%d idle TLS connections after GET /docs: %d KB in use more, %d KB each (documented: at most %d KB)", n, grew>>10, grew/n>>10, idleConnCost>>10)
	if grew > idleConnCost*n {
		t.Fatalf("%d idle connections cost %d KB each; docs/configuration.md says at most %d KB", n, grew/n>>10, idleConnCost>>10)
	}
}

// A connection that has shown no valid key is closed after
// keyless_idle_timeout idle; a vendor's, on which a valid key was served,
// idles for the server's idle timeout (60s).
func TestKeylessConnectionsClosedSooner(t *testing.T) {
	b := newTestBackend(t)
	gw := startTLSGateway(t, b, func(o *Options) {
		o.Config.ReadTimeout, o.Config.KeylessIdleTimeout = time.Second, time.Second
	})
	key, _ := b.addKey("vendor-a", "approved", time.Now().Add(time.Hour))
	vendor, err := gw.handshake(gw.ca.ClientConfig(tlsName))
	if err != nil {
		t.Fatal(err)
	}
	defer vendor.Close()
	if got, err := servedAs(vendor, key, ""); err != nil {
		t.Fatalf("a vendor's request: %q %v", got, err)
	}
	keyless, err := gw.handshake(gw.ca.ClientConfig(tlsName))
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
	if _, err := keyless.Read(make([]byte, 1)); err == nil || isTimeoutErr(err) {
		t.Fatalf("a keyless connection idle %v: %v, want closed by the gateway", time.Since(start), err)
	}
	// The vendor's connection, idle longer than that, is still served.
	if got, err := servedAs(vendor, key, ""); err != nil {
		t.Fatalf("the vendor's connection after the keyless one was closed: %q %v", got, err)
	}
}

func isTimeoutErr(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
