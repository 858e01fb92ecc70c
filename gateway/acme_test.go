package gateway

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"vendorgate/gateway/openapi"
	"vendorgate/shared/testcert"
)

const acmeDomain = "acme.vendorgate.test"

// freeLoopback is a loopback address free now.
func freeLoopback(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startProcess runs a helper binary until the test ends; its output goes to
// the test's log on failure.
func startProcess(t *testing.T, env []string, name string, args ...string) *syncBuffer {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%s:\n%s", name, out.String())
		}
	})
	return out
}

func waitTCP(t *testing.T, addr string) {
	t.Helper()
	for i := 0; i < 200; i++ {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("nothing listens on %s", addr)
}

// The gateway obtains a certificate from an ACME CA (Pebble, Let's
// Encrypt's test server) for its domain, answering the TLS-ALPN-01
// challenge on its own public listener, or, when the CA cannot validate
// there, HTTP-01 on http_listen; then it serves the certificate, counts the
// order and shows its expiry in the gauge.
func TestACMEObtainsCertificateFromPebble(t *testing.T) {
	t.Run("tls-alpn-01", func(t *testing.T) { testACME(t, false) })
	t.Run("http-01", func(t *testing.T) { testACME(t, true) })
}

// testACME runs one order; with http01 the CA validates TLS-ALPN-01 on a
// closed port (it fails there) and HTTP-01 on the plain listener.
func testACME(t *testing.T, http01 bool) {
	for _, bin := range []string{"pebble", "pebble-challtestsrv"} {
		if _, err := exec.LookPath(bin); err != nil {
			if os.Getenv("CI") != "" { // .ci/run installs it: a skip there would hide the test
				t.Fatalf("%s not on PATH (Debian package: pebble)", bin)
			}
			t.Skipf("%s not on PATH (Debian package: pebble)", bin)
		}
	}
	dir := t.TempDir()
	ca := testcert.NewCA(t)
	rootFile := filepath.Join(dir, "ca.pem")
	ca.WriteRoot(t, rootFile)
	pebbleCert, pebbleKey := ca.Issue(t, time.Now().Add(time.Hour), "localhost", "127.0.0.1").Write(t, dir, "pebble")
	gwAddr, pebbleAddr, pebbleMgmt, dnsAddr, challMgmt := freeLoopback(t), freeLoopback(t), freeLoopback(t), freeLoopback(t), freeLoopback(t)
	httpAddr := ""
	_, tlsPort, _ := net.SplitHostPort(gwAddr)
	httpPort := "1" // nothing listens there
	if http01 {
		httpAddr = freeLoopback(t)
		_, httpPort, _ = net.SplitHostPort(httpAddr)
		_, tlsPort, _ = net.SplitHostPort(freeLoopback(t)) // closed: TLS-ALPN-01 fails
	}

	// challtestsrv answers every name with 127.0.0.1; Pebble asks it.
	startProcess(t, nil, "pebble-challtestsrv", "-defaultIPv4", "127.0.0.1", "-defaultIPv6", "", "-dns01", dnsAddr,
		"-management", challMgmt, "-http01", "", "-https01", "", "-tlsalpn01", "")
	conf, _ := json.Marshal(map[string]any{"pebble": map[string]any{
		"listenAddress": pebbleAddr, "managementListenAddress": pebbleMgmt, "certificate": pebbleCert, "privateKey": pebbleKey,
		"httpPort": atoi(httpPort), "tlsPort": atoi(tlsPort), "ocspResponderURL": "", "externalAccountBindingRequired": false}})
	confFile := filepath.Join(dir, "pebble.json")
	testcert.WriteFile(t, confFile, conf)
	pebbleLog := startProcess(t, []string{"PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0"}, "pebble", "-config", confFile, "-dnsserver", dnsAddr)
	waitTCP(t, pebbleAddr)
	waitTCP(t, pebbleMgmt)

	b := newTestBackend(t)
	cfg := testConfig(b)
	cfg.Listen, cfg.HTTPListen = gwAddr, httpAddr
	cfg.TLS.WatchInterval = 0
	cfg.TLS.ACME.Domains = []string{acmeDomain}
	cfg.TLS.ACME.CA = "https://" + pebbleAddr + "/dir"
	cfg.TLS.ACME.CARootFile = rootFile
	cfg.TLS.ACME.Storage = filepath.Join(dir, "acme")
	logs := &syncBuffer{}
	g, err := New(Options{Config: cfg, Logger: slog.New(slog.NewJSONHandler(logs, nil)), OpenAPI: openapi.Document})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := net.Listen("tcp", gwAddr)
	if err != nil {
		t.Fatal(err)
	}
	adm, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = g.Serve(pub, adm); close(done) }()
	t.Cleanup(func() { _ = g.Shutdown(0, 5*time.Second); <-done })
	gw := &testGateway{g: g, cfg: cfg, url: "https://" + gwAddr, admin: "http://" + adm.Addr().String()}
	if http01 {
		plain, err := net.Listen("tcp", httpAddr)
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = g.ServePlain(plain) }()
	}

	// Pebble's root signs what it issues; its management port serves it.
	mgmt := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool}}}
	resp, err := mgmt.Get("https://" + pebbleMgmt + "/roots/0")
	if err != nil {
		t.Fatal(err)
	}
	rootPEM, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(rootPEM) {
		t.Fatalf("Pebble's root: %q", rootPEM)
	}

	var lastErr error
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", gwAddr, &tls.Config{ServerName: acmeDomain, RootCAs: roots})
		if err == nil {
			names := c.ConnectionState().PeerCertificates[0].DNSNames
			c.Close()
			if len(names) != 1 || names[0] != acmeDomain {
				t.Fatalf("served a certificate for %v", names)
			}
			lastErr = nil
			break
		}
		lastErr = err
		time.Sleep(200 * time.Millisecond)
	}
	if lastErr != nil {
		t.Fatalf("no certificate from Pebble within 90s: %v\nlogs:\n%s", lastErr, logs.String())
	}
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{ServerName: acmeDomain, RootCAs: roots}}}
	if resp, err := cl.Get(gw.url + "/docs"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /docs with the ACME certificate: %v %v", err, resp)
	} else {
		resp.Body.Close()
	}
	if n := metricValue(t, gw, `vendorgate_gateway_acme_orders_total{kind="obtain",result="ok"}`); n != 1 {
		t.Fatalf(`acme_orders_total{kind="obtain",result="ok"} %v, want 1`, n)
	}
	if v := metricValue(t, gw, `vendorgate_gateway_tls_certificate_expiry_timestamp_seconds{cert_file="acme",names="`+acmeDomain+`"}`); v < float64(time.Now().Add(24*time.Hour).Unix()) {
		t.Fatalf("expiry gauge %v", v)
	}
	if viaHTTP := strings.Contains(pebbleLog.String(), "validate w/ HTTP"); viaHTTP != http01 {
		t.Fatalf("Pebble validated over HTTP-01: %v, want %v", viaHTTP, http01)
	}
	if !strings.Contains(logs.String(), "acme certificate obtained") {
		t.Fatalf("no log line of the order:\n%s", logs.String())
	}
	// With the certificate, the balancers' readiness query passes (it
	// failed its "tls" check while there was none).
	if resp, err := http.Get(gw.admin + "/readyz?exclude=redis&exclude=backend&verbose"); err != nil {
		t.Fatal(err)
	} else {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"tls"`) {
			t.Fatalf("/readyz with the ACME certificate obtained: %d %s", resp.StatusCode, body)
		}
	}
	if got := g.TLSServed(); got != "acme "+acmeDomain+" expires "+g.Certificates()[0].NotAfter.UTC().Format(time.RFC3339) {
		t.Fatalf("TLSServed with the certificate obtained: %q", got)
	}
}

func atoi(s string) int {
	var n int
	_, _ = fmt.Sscan(s, &n)
	return n
}
