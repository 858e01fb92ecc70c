package gateway

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pires/go-proxyproto"

	"vendorgate/config"
	"vendorgate/shared/testcert"
	"vendorgate/shared/wire"
)

// needHAProxy skips a test without haproxy, but fails it in CI, which
// installs it.
func needHAProxy(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("haproxy"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("haproxy not on PATH (Debian package: haproxy)")
		}
		t.Skip("haproxy not on PATH")
	}
}

// startTCPBalancer runs HAProxy in mode tcp in front of gw, as
// deploy/haproxy/haproxy-tcp.cfg does (TLS passed through, a PROXY v2
// header sent), and returns its frontend's address.
func startTCPBalancer(t *testing.T, gw *tlsGateway) string {
	t.Helper()
	fe := freeLoopback(t)
	cfgFile := filepath.Join(gw.dir, "haproxy-tcp.cfg")
	testcert.WriteFile(t, cfgFile, []byte(fmt.Sprintf(`global
  maxconn 2000
defaults
  mode tcp
  timeout connect 5s
  timeout client 35s
  timeout server 35s
  retries 2
frontend vendor_api_tls
  bind %s
  default_backend gateways_tls
backend gateways_tls
  server gw %s send-proxy-v2
`, fe, gw.addr)))
	startProcess(t, nil, "haproxy", "-f", cfgFile, "-db")
	waitTCP(t, fe)
	return fe
}

// handshakeFrom dials addr from the loopback address src and runs a TLS
// handshake with the gateway's certificate.
func (g *tlsGateway) handshakeFrom(addr, src string) (*tls.Conn, error) {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	tc := tls.Client(c, g.ca.ClientConfig(tlsName))
	if err := tc.Handshake(); err != nil {
		c.Close()
		return nil, err
	}
	// A refusal under TLS is a close after the handshake only if the
	// bound runs after it: a read shows a close that came at once.
	_ = c.SetDeadline(time.Time{})
	return tc, nil
}

// served sends GET /me with key on c (X-Forwarded-For: forged) and returns
// the client address the backend was told, or an error if it was not
// served.
func servedAs(c net.Conn, key, forged string) (string, error) {
	req := "GET /api/vendor/v1/me HTTP/1.1\r\nHost: " + tlsName + "\r\nX-API-Key: " + key + "\r\n"
	if forged != "" {
		req += "X-Forwarded-For: " + forged + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		return "", err
	}
	a, err := readAnswer(c, 5*time.Second)
	if err != nil {
		return "", err
	}
	if a.status != 200 {
		return "", fmt.Errorf("%d %s", a.status, a.body)
	}
	var echo map[string]string
	if err := json.Unmarshal(a.body, &echo); err != nil {
		return "", err
	}
	return echo[wire.HeaderForwardedFor], nil
}

// Behind HAProxy in mode tcp (deploy/haproxy/haproxy-tcp.cfg's shape) the
// per-peer bounds apply to the client address its PROXY header names, as
// to a direct peer: one client holds max_conns_per_peer connections and no
// more, opens max_new_conns_per_peer a second and no more, while another
// client through the same balancer is served.
func TestPerPeerBoundsBehindHAProxy(t *testing.T) {
	needHAProxy(t)
	t.Run("open", func(t *testing.T) {
		const bound = 4
		b := newTestBackend(t)
		gw := startTLSGateway(t, b, func(o *Options) {
			o.Config.ProxyProtocol = true
			o.Config.TrustedProxies = config.List{"127.0.0.1"}
			o.Config.MaxConnsPerPeer = bound
		})
		key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
		lb := startTCPBalancer(t, gw)
		held := make([]*tls.Conn, bound)
		for i := range held {
			tc, err := gw.handshakeFrom(lb, "127.0.0.5")
			if err != nil {
				t.Fatalf("connection %d within the bound: %v", i+1, err)
			}
			defer tc.Close()
			held[i] = tc
		}
		refused := 0
		for range 3 {
			tc, err := gw.handshakeFrom(lb, "127.0.0.5")
			if err != nil {
				refused++
				continue
			}
			// Refused after the handshake, if at all: it is then closed
			// before it is served.
			if _, err := servedAs(tc, key, ""); err != nil {
				refused++
			}
			tc.Close()
		}
		if refused != 3 {
			t.Fatalf("127.0.0.5 holding %d connections through the balancer: %d of 3 more refused, want 3", bound, refused)
		}
		if n := metricValue(t, gw.testGateway, `vendorgate_gateway_connections_refused_total{reason="open"}`); n != 3 {
			t.Fatalf(`connections_refused_total{reason="open"} %v, want 3`, n)
		}
		other, err := gw.handshakeFrom(lb, "127.0.0.6")
		if err != nil {
			t.Fatalf("another client through the balancer: %v", err)
		}
		defer other.Close()
		for _, c := range []net.Conn{other, held[0]} {
			if got, err := servedAs(c, key, ""); err != nil || (got != "127.0.0.6" && got != "127.0.0.5") {
				t.Fatalf("served as %q, %v", got, err)
			}
		}
	})
	t.Run("new", func(t *testing.T) {
		const rate = 2 // a second: two at once, then one every 500 ms
		b := newTestBackend(t)
		gw := startTLSGateway(t, b, func(o *Options) {
			o.Config.ProxyProtocol = true
			o.Config.TrustedProxies = config.List{"127.0.0.1"}
			o.Config.MaxNewConnsPerPeer = rate
		})
		lb := startTCPBalancer(t, gw)
		const tries = 20
		admitted := 0
		start := time.Now()
		for range tries {
			if tc, err := gw.handshakeFrom(lb, "127.0.0.7"); err == nil {
				admitted++
				tc.Close()
			}
		}
		// GCRA admits rate at once and then one every 1/rate: whatever
		// the machine's pace, no more than this in the time taken.
		most := rate + int(math.Ceil(time.Since(start).Seconds()*rate))
		if admitted > most || admitted < 1 {
			t.Fatalf("127.0.0.7 through the balancer: %d of %d new connections admitted in %v, want 1 to %d", admitted, tries, time.Since(start), most)
		}
		if n := metricValue(t, gw.testGateway, `vendorgate_gateway_connections_refused_total{reason="rate"}`); n != float64(tries-admitted) {
			t.Fatalf(`connections_refused_total{reason="rate"} %v, want %d`, n, tries-admitted)
		}
		if tc, err := gw.handshakeFrom(lb, "127.0.0.8"); err != nil {
			t.Fatalf("another client through the balancer: %v", err)
		} else {
			tc.Close()
		}
	})
}

// proxyHeader is a PROXY header as a balancer writes it.
func proxyHeader(t *testing.T, h *proxyproto.Header) []byte {
	t.Helper()
	b, err := h.Format()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A PROXY header that names no client (v1 UNKNOWN, v2 LOCAL, v2 AF_UNIX, a
// v2 source that is itself a trusted proxy) is the balancer's own
// connection: the client is the balancer's address, and an
// X-Forwarded-For sent inside the stream is not believed (it is the
// client's to write).
func TestProxyHeaderWithoutClientIsTheBalancer(t *testing.T) {
	b := newTestBackend(t)
	gw := startTLSGateway(t, b, func(o *Options) {
		o.Config.ProxyProtocol = true
		o.Config.TrustedProxies = config.List{"127.0.0.1", "10.0.0.0/8"}
	})
	key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	headers := []struct {
		name string
		h    []byte
	}{
		{"v1 UNKNOWN", []byte("PROXY UNKNOWN\r\n")},
		{"v2 LOCAL", proxyHeader(t, &proxyproto.Header{Version: 2, Command: proxyproto.LOCAL, TransportProtocol: proxyproto.UNSPEC})},
		{"v2 AF_UNIX", proxyHeader(t, &proxyproto.Header{Version: 2, Command: proxyproto.PROXY, TransportProtocol: proxyproto.UnixStream,
			SourceAddr: &net.UnixAddr{Net: "unix", Name: "/run/client.sock"}, DestinationAddr: &net.UnixAddr{Net: "unix", Name: "/run/lb.sock"}})},
		{"v2 trusted source", proxyHeader(t, &proxyproto.Header{Version: 2, Command: proxyproto.PROXY, TransportProtocol: proxyproto.TCPv4,
			SourceAddr: &net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 4000}, DestinationAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 443}})},
		{"v2 client", proxyHeader(t, &proxyproto.Header{Version: 2, Command: proxyproto.PROXY, TransportProtocol: proxyproto.TCPv4,
			SourceAddr: &net.TCPAddr{IP: net.ParseIP("198.51.100.4"), Port: 4000}, DestinationAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 443}})},
	}
	for _, h := range headers {
		t.Run(h.name, func(t *testing.T) {
			tc := gw.withProxyHeader(t, h.h)
			defer tc.Close()
			got, err := servedAs(tc, key, "203.0.113.9")
			want := "127.0.0.1"
			if h.name == "v2 client" {
				want = "198.51.100.4"
			}
			if err != nil || got != want {
				t.Fatalf("client %q, %v; want %s (the X-Forwarded-For inside the stream is the client's claim)", got, err, want)
			}
		})
	}
	if strings.Contains(gw.logs.String(), "203.0.113.9") {
		t.Fatalf("a log line names the client's claim 203.0.113.9:\n%s", gw.logs.String())
	}
}

// withProxyHeader connects to the gateway from the trusted 127.0.0.1,
// writes h and runs a TLS handshake.
func (g *tlsGateway) withProxyHeader(t *testing.T, h []byte) *tls.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", g.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(h); err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	tc := tls.Client(c, g.ca.ClientConfig(tlsName))
	if err := tc.Handshake(); err != nil {
		c.Close()
		t.Fatalf("handshake after the header: %v", err)
	}
	return tc
}
