package gateway

import (
	"bytes"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"vendorgate/config"
	"vendorgate/gateway/openapi"
	"vendorgate/shared/apierr"
	"vendorgate/shared/testcert"
	"vendorgate/shared/wire"
)

// tlsName is the name the test certificates are issued for.
const tlsName = "api.vendorgate.test"

// tlsGateway is a gateway serving HTTPS with a certificate from files in
// dir, issued by ca for tlsName and 127.0.0.1.
type tlsGateway struct {
	*testGateway
	ca                *testcert.CA
	dir               string
	certFile, keyFile string
	addr              string
	logs              *syncBuffer
}

// syncBuffer is a log sink tests read while the gateway writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startTLSGateway(t *testing.T, b *testBackend, mod func(*Options)) *tlsGateway {
	t.Helper()
	ca := testcert.NewCA(t)
	dir := t.TempDir()
	certFile, keyFile := ca.Issue(t, time.Now().Add(90*24*time.Hour), tlsName, "127.0.0.1").Write(t, dir, "api")
	logs := &syncBuffer{}
	gw := startGateway(t, b, func(o *Options) {
		o.Config.TLS.CertFile, o.Config.TLS.KeyFile = certFile, keyFile
		o.Config.TLS.WatchInterval = 0 // the tests that watch set it
		o.Logger = slog.New(slog.NewJSONHandler(logs, nil))
		if mod != nil {
			mod(o)
		}
	})
	addr := strings.TrimPrefix(gw.url, "http://")
	gw.url = "https://" + addr
	return &tlsGateway{testGateway: gw, ca: ca, dir: dir, certFile: certFile, keyFile: keyFile, addr: addr, logs: logs}
}

// client is an HTTPS client that trusts the test CA and asks for tlsName.
func (g *tlsGateway) client() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: g.ca.ClientConfig(tlsName)}}
}

// handshake dials the gateway and runs a handshake with cfg.
func (g *tlsGateway) handshake(cfg *tls.Config) (*tls.Conn, error) {
	c, err := net.DialTimeout("tcp", g.addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	tc := tls.Client(c, cfg)
	if err := tc.Handshake(); err != nil {
		c.Close()
		return nil, err
	}
	return tc, nil
}

func (g *tlsGateway) get(t *testing.T, cl *http.Client, path, key string) answer {
	t.Helper()
	req, _ := http.NewRequest("GET", g.url+path, nil)
	if key != "" {
		req.Header.Set(wire.HeaderAPIKey, key)
	}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, header: resp.Header, body: body}
	a.env, a.isEnv = apierr.Parse(body)
	if resp.TLS == nil {
		t.Fatal("answered without TLS")
	}
	return a
}

// The public listener serves HTTPS with the certificate from its files:
// TLS 1.3 by preference, ALPN http/1.1, a vendor request proxied and the
// documentation marked HSTS (fasthttp sees the connection as TLS through
// the wrappers).
func TestHTTPSServesRequests(t *testing.T) {
	b := newTestBackend(t)
	gw := startTLSGateway(t, b, nil)
	key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	cl := gw.client()
	if a := gw.get(t, cl, "/api/vendor/v1/me", key); a.status != 200 {
		t.Fatalf("GET /me over HTTPS: %d %s", a.status, a.body)
	}
	tc, err := gw.handshake(gw.ca.ClientConfig(tlsName))
	if err != nil {
		t.Fatal(err)
	}
	st := tc.ConnectionState()
	tc.Close()
	if st.Version != tls.VersionTLS13 || st.NegotiatedProtocol != "" {
		t.Fatalf("version %x, ALPN %q; want TLS 1.3 and no ALPN when none is offered", st.Version, st.NegotiatedProtocol)
	}
	alpn := gw.ca.ClientConfig(tlsName)
	alpn.NextProtos = []string{"h2", "http/1.1"}
	if tc, err = gw.handshake(alpn); err != nil {
		t.Fatal(err)
	}
	if p := tc.ConnectionState().NegotiatedProtocol; p != "http/1.1" {
		t.Fatalf("ALPN %q, want http/1.1 (no HTTP/2 here)", p)
	}
	tc.Close()
	docs := gw.get(t, cl, "/docs", "")
	if docs.status != 200 || docs.header.Get("Strict-Transport-Security") != "max-age=31536000" {
		t.Fatalf("/docs over HTTPS: %d, HSTS %q", docs.status, docs.header.Get("Strict-Transport-Security"))
	}
	plain := startGateway(t, b, nil)
	if a := do(t, "GET", plain.url+"/docs", ""); a.status != 200 || a.header.Get("Strict-Transport-Security") != "" {
		t.Fatalf("/docs over plain HTTP: %d, HSTS %q; want none", a.status, a.header.Get("Strict-Transport-Security"))
	}
	if !strings.Contains(gw.logs.String(), `"status":200`) {
		t.Fatalf("no access log line of the requests: %s", gw.logs.String())
	}
}

// The progress bound (idleconn) sits under TLS and is still found by the
// streamed report: a client that stops reading is cut once
// stream_idle_timeout passes, long before the whole-answer write timeout.
func TestStalledClientIsCutOverTLS(t *testing.T) {
	const size = 16 << 20
	body, _ := randomBody(t, size)
	b := newTestBackend(t)
	b.setReport(func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/pdf")
		ctx.SetBody(body)
	})
	gw := startTLSGateway(t, b, func(o *Options) {
		o.Config.Proxy.Timeout = 30 * time.Second
		o.Config.Proxy.StreamIdleTimeout = time.Second
	})
	key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	d := fetch(t, gw.url+"/api/vendor/v1/orders/o1/reports/mvr", key, client{waitFor: downloadsLetGo(t, gw.testGateway), smallBuffer: true, limit: 20 * time.Second,
		tls: gw.ca.ClientConfig(tlsName)})
	t.Logf("received %d of %d bytes in %s: %v", d.n, size, d.took.Round(time.Millisecond), d.err)
	if d.status != 200 || d.contentLength != size {
		t.Fatalf("status %d, Content-Length %d", d.status, d.contentLength)
	}
	if d.err == nil || isTimeout(d.err) || d.n >= size {
		t.Fatalf("stalled client: %d of %d bytes, read error %v; want the connection closed short", d.n, size, d.err)
	}
}

// BenchmarkServerProxiedTLS is BenchmarkServerProxied/read over HTTPS on
// kept-alive connections: what TLS adds to a request once the handshake
// is paid.
func BenchmarkServerProxiedTLS(b *testing.B) {
	be := newTestBackend(b)
	ca := testcert.NewCA(b)
	certFile, keyFile := ca.Issue(b, time.Now().Add(time.Hour), tlsName, "127.0.0.1").Write(b, b.TempDir(), "api")
	gw := startGateway(b, be, func(o *Options) {
		o.Config.Limits.Vendor.Reads = config.Limit{Rate: 1 << 30, Period: time.Second}
		o.Config.TLS.CertFile, o.Config.TLS.KeyFile = certFile, keyFile
		o.DisableAccessLog = true
	})
	key, _ := be.addKey("vendor-bench", wire.VendorApproved, time.Now().Add(time.Hour))
	c := &fasthttp.HostClient{Addr: strings.TrimPrefix(gw.url, "http://"), MaxConns: 64, IsTLS: true, TLSConfig: ca.ClientConfig(tlsName)}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		for pb.Next() {
			req.Reset()
			req.SetRequestURI("https://gw/api/vendor/v1/orders/fast")
			req.Header.Set(wire.HeaderAPIKey, key)
			if err := c.Do(req, resp); err != nil || resp.StatusCode() != 200 {
				b.Fatalf("%v %d %s", err, resp.StatusCode(), resp.Body())
			}
		}
	})
}

// The bare-LF guard reads the plaintext: over TLS a head ending in a bare
// LF is refused at once with 400, as over plain HTTP.
func TestBareLFRefusedOverTLS(t *testing.T) {
	b := newTestBackend(t)
	gw := startTLSGateway(t, b, nil)
	tc, err := gw.handshake(gw.ca.ClientConfig(tlsName))
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	if _, err := io.WriteString(tc, "GET /api/vendor/v1/me HTTP/1.1\r\nHost: gw\r\n\n"); err != nil {
		t.Fatal(err)
	}
	a, err := readAnswer(tc, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	a.wantError(t, 400, apierr.ValidationError)
}

// Start refuses a key that does not match its certificate, a file it
// cannot read, and certificates listed without a default one, naming the
// file; an expired certificate starts, with a loud line and its expiry in
// the gauge.
func TestTLSStartChecks(t *testing.T) {
	b := newTestBackend(t)
	ca := testcert.NewCA(t)
	dir := t.TempDir()
	certFile, keyFile := ca.Issue(t, time.Now().Add(time.Hour), tlsName).Write(t, dir, "a")
	otherCert, otherKey := ca.Issue(t, time.Now().Add(time.Hour), tlsName).Write(t, dir, "b")
	expiredCert, expiredKey := ca.Issue(t, time.Now().Add(-time.Hour), tlsName).Write(t, dir, "old")
	for _, c := range []struct {
		name      string
		tls       config.TLS
		wantInErr []string
	}{
		{"key of another certificate", config.TLS{CertFile: certFile, KeyFile: otherKey}, []string{certFile, otherKey, "private key does not match"}},
		{"missing certificate file", config.TLS{CertFile: dir + "/none.pem", KeyFile: keyFile}, []string{dir + "/none.pem", "no such file"}},
		{"missing key file", config.TLS{CertFile: otherCert, KeyFile: dir + "/none-key.pem"}, []string{dir + "/none-key.pem", "no such file"}},
		{"key without certificate", config.TLS{KeyFile: keyFile}, []string{keyFile, "has no certificate"}},
		{"certificates without a default", config.TLS{Certificates: []config.CertFiles{{CertFile: certFile, KeyFile: keyFile}}}, []string{"tls.cert_file"}},
	} {
		cfg := testConfig(b)
		cfg.TLS = c.tls
		_, err := New(Options{Config: cfg, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), OpenAPI: openapi.Document})
		if err == nil {
			t.Errorf("%s: started", c.name)
			continue
		}
		for _, want := range c.wantInErr {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %q does not say %q", c.name, err, want)
			}
		}
	}
	logs := &syncBuffer{}
	gw := startGateway(t, b, func(o *Options) {
		o.Config.TLS = config.TLS{CertFile: expiredCert, KeyFile: expiredKey}
		o.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	})
	if !strings.Contains(logs.String(), "TLS CERTIFICATE EXPIRED") || !strings.Contains(logs.String(), expiredCert) {
		t.Fatalf("an expired certificate at start: no loud line naming it: %s", logs.String())
	}
	if v := metricValue(t, gw, `vendorgate_gateway_tls_certificate_expiry_timestamp_seconds{cert_file="`+expiredCert+`",names="`+tlsName+`"}`); v > float64(time.Now().Unix()) {
		t.Fatalf("expiry gauge %v is not in the past", v)
	}
}
