package gateway

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"vendorgate/config"
	"vendorgate/shared/testcert"
	"vendorgate/shared/wire"
)

// Behind a load balancer that passes TLS through (HAProxy in TCP mode,
// sending the PROXY header, v1 and v2), the gateway takes the client's
// address from the header: the backend is told the client's address, not
// the balancer's. A trusted proxy's connection without a header is
// refused; another peer's header is never read, so a client cannot claim
// an address.
func TestProxyProtocolBehindHAProxy(t *testing.T) {
	if _, err := exec.LookPath("haproxy"); err != nil {
		if os.Getenv("CI") != "" { // .ci/run installs it: a skip there would hide the test
			t.Fatal("haproxy not on PATH (Debian package: haproxy)")
		}
		t.Skip("haproxy not on PATH")
	}
	b := newTestBackend(t)
	gw := startTLSGateway(t, b, func(o *Options) {
		o.Config.ProxyProtocol = true
		o.Config.TrustedProxies = config.List{"127.0.0.1"}
	})
	key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	v1, v2 := freeLoopback(t), freeLoopback(t)
	cfgFile := filepath.Join(gw.dir, "haproxy.cfg")
	testcert.WriteFile(t, cfgFile, []byte(fmt.Sprintf(`global
  maxconn 100
defaults
  mode tcp
  timeout connect 5s
  timeout client 30s
  timeout server 30s
frontend v1
  bind %s
  default_backend v1
frontend v2
  bind %s
  default_backend v2
backend v1
  server gw %s send-proxy
backend v2
  server gw %s send-proxy-v2
`, v1, v2, gw.addr, gw.addr)))
	startProcess(t, nil, "haproxy", "-f", cfgFile, "-db")
	waitTCP(t, v1)
	waitTCP(t, v2)

	// get sends GET /me through addr from the loopback address src over
	// TLS and returns the client address the backend was told.
	get := func(addr, src string) (string, error) {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
		tr := &http.Transport{TLSClientConfig: gw.ca.ClientConfig(tlsName), DialContext: d.DialContext, DisableKeepAlives: true}
		cl := &http.Client{Timeout: 10 * time.Second, Transport: tr}
		req, _ := http.NewRequest("GET", "https://"+addr+"/api/vendor/v1/me", nil)
		req.Header.Set(wire.HeaderAPIKey, key)
		resp, err := cl.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			return "", fmt.Errorf("%d %s", resp.StatusCode, body)
		}
		var echo map[string]string
		if err := json.Unmarshal(body, &echo); err != nil {
			return "", err
		}
		return echo[wire.HeaderForwardedFor], nil
	}
	for _, lb := range []struct{ name, addr string }{{"PROXY v1", v1}, {"PROXY v2", v2}} {
		got, err := get(lb.addr, "127.0.0.5")
		if err != nil || got != "127.0.0.5" {
			t.Fatalf("through HAProxy (%s) from 127.0.0.5: client %q, %v; want 127.0.0.5", lb.name, got, err)
		}
	}
	if _, err := get(gw.addr, "127.0.0.1"); err == nil {
		t.Fatal("the trusted proxy's address sent no PROXY header and was served")
	}
	if got, err := get(gw.addr, "127.0.0.7"); err != nil || got != "127.0.0.7" {
		t.Fatalf("a direct client at 127.0.0.7: %q %v", got, err)
	}
	// A direct client that sends a PROXY header of its own is not
	// believed: the header is not TLS, the handshake fails.
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.7")}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", gw.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "PROXY TCP4 203.0.113.9 127.0.0.1 4000 443\r\n")
	if err := tls.Client(c, gw.ca.ClientConfig(tlsName)).Handshake(); err == nil {
		t.Fatal("a client's own PROXY header was read as a header")
	}
}
