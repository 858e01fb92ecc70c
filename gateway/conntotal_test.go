package gateway

import (
	"crypto/tls"
	"io"
	"net"
	"runtime"
	"testing"
	"time"
)

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
