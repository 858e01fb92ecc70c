package edge

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"vendorgate/config"
	"vendorgate/shared/testcert"
)

// Only TLS 1.2 and up, with ECDHE and AEAD ciphers; every failed handshake
// is counted by reason and none is logged.
func TestHandshakeFailuresCountedByReason(t *testing.T) {
	e := startEdge(t, edgeOptions{}, nil)
	tls12 := e.ca.ClientConfig(tlsName)
	tls12.MaxVersion = tls.VersionTLS12
	tc, err := e.handshake(tls12)
	if err != nil {
		t.Fatalf("TLS 1.2 with Go's default suites: %v", err)
	}
	if cs := tc.ConnectionState().CipherSuite; cs != tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 {
		t.Fatalf("TLS 1.2 suite %s", tls.CipherSuiteName(cs))
	}
	tc.Close()

	cases := []struct {
		name   string
		cfg    func() *tls.Config
		raw    string // sent instead of a handshake
		reason string
	}{
		{name: "TLS 1.1", reason: "version_or_cipher", cfg: func() *tls.Config {
			c := e.ca.ClientConfig(tlsName)
			c.MinVersion, c.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
			return c
		}},
		{name: "TLS 1.2 with CBC only", reason: "version_or_cipher", cfg: func() *tls.Config {
			c := tls12.Clone()
			c.CipherSuites = []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA}
			return c
		}},
		{name: "unknown server name", reason: "unknown_sni", cfg: func() *tls.Config { return e.ca.ClientConfig("other.vendorgate.test") }},
		{name: "client does not trust the CA", reason: "bad_certificate", cfg: func() *tls.Config { return &tls.Config{ServerName: tlsName} }},
		{name: "plain HTTP to the HTTPS port", reason: "not_tls", raw: "GET /docs HTTP/1.1\r\nHost: x\r\n\r\n"},
	}
	for _, c := range cases {
		before := e.metric(t, `vendorgate_gateway_tls_handshake_failures_total{reason="`+c.reason+`"}`)
		if c.raw != "" {
			conn, err := net.Dial("tcp", e.addr)
			if err != nil {
				t.Fatal(err)
			}
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			_, _ = io.WriteString(conn, c.raw)
			got, _ := io.ReadAll(conn)
			conn.Close()
			if len(got) > 0 && bytes.Contains(got, []byte("HTTP/1.1")) {
				t.Errorf("%s: answered in plaintext HTTP: %q", c.name, got)
			}
		} else if tc, err := e.handshake(c.cfg()); err == nil {
			tc.Close()
			t.Errorf("%s: handshake succeeded", c.name)
			continue
		}
		// The server counts once its side of the handshake has failed,
		// which may be just after the client's.
		var after float64
		for i := 0; i < 100; i++ {
			if after = e.metric(t, `vendorgate_gateway_tls_handshake_failures_total{reason="`+c.reason+`"}`); after > before {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if after != before+1 {
			t.Errorf("%s: handshake_failures_total{reason=%q} went from %v to %v, want +1", c.name, c.reason, before, after)
		}
	}
	if l := e.logs.String(); strings.Contains(l, "tls") || strings.Contains(l, "connection error") {
		t.Fatalf("failed handshakes were logged: %s", l)
	}
}

// A client that opens a connection and never finishes its handshake is
// closed within read_timeout, counted as a timeout, and holds nothing
// after.
func TestStalledHandshakeClosedWithinReadTimeout(t *testing.T) {
	e := startEdge(t, edgeOptions{}, func(c *config.Gateway) { c.ReadTimeout = time.Second })
	for _, send := range []string{"", "\x16\x03\x01\x02\x00\x01"} { // nothing; half a ClientHello
		c, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(c, send)
		start := time.Now()
		_ = c.SetReadDeadline(start.Add(10 * time.Second))
		_, err = io.ReadAll(c)
		took := time.Since(start)
		c.Close()
		if isTimeout(err) {
			t.Fatalf("sent %q: still open after 10s", send)
		}
		t.Logf("sent %q: closed after %s", send, took.Round(time.Millisecond))
	}
	if n := e.metric(t, `vendorgate_gateway_tls_handshake_failures_total{reason="timeout"}`); n != 2 {
		t.Fatalf("handshake_failures_total{reason=\"timeout\"} %v, want 2", n)
	}
}

// The per-peer bound holds over TLS: the connection over it is closed
// before any handshake (a TLS client cannot read a plaintext 429) and
// counted; the ones within it are served.
func TestConnectionsPerPeerOverTLS(t *testing.T) {
	const bound = 3
	e := startEdge(t, edgeOptions{}, func(c *config.Gateway) { c.MaxConnsPerPeer = bound })
	held := make([]*tls.Conn, bound)
	for i := range held {
		tc, err := e.handshake(e.ca.ClientConfig(tlsName))
		if err != nil {
			t.Fatalf("connection %d within the bound: %v", i+1, err)
		}
		defer tc.Close()
		held[i] = tc
	}
	if _, err := e.handshake(e.ca.ClientConfig(tlsName)); err == nil {
		t.Fatal("a connection over the bound finished its handshake")
	}
	if n := e.metric(t, `vendorgate_gateway_connections_refused_total{reason="open"}`); n != 1 {
		t.Fatalf(`connections_refused_total{reason="open"} %v, want 1`, n)
	}
	if _, err := io.WriteString(held[0], "GET /fast HTTP/1.1\r\nHost: gw\r\nX-API-Key: "+validKey+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if a, err := readAnswer(held[0], 5*time.Second); err != nil || a.status != 200 {
		t.Fatalf("a held connection: %v %d %s", err, a.status, a.body)
	}
}

// Several certificates are chosen by the server name the client asks for;
// a client that sends none gets the default one.
func TestCertificateChosenBySNI(t *testing.T) {
	e := startEdge(t, edgeOptions{}, nil)
	// A second certificate from the same CA, and an edge serving both.
	cert2, key2 := e.ca.Issue(t, time.Now().Add(time.Hour), "*.tenant.vendorgate.test").Write(t, e.dir, "tenants")
	e2 := startEdge(t, edgeOptions{}, func(c *config.Gateway) {
		c.TLS = config.TLS{CertFile: e.certFile, KeyFile: e.keyFile, Certificates: []config.CertFiles{{CertFile: cert2, KeyFile: key2}}}
	})
	addr := e2.addr
	for _, c := range []struct{ sni, want string }{
		{tlsName, tlsName},
		{"a.tenant.vendorgate.test", "*.tenant.vendorgate.test"},
		{"", tlsName},
	} {
		cfg := e.ca.ClientConfig(c.sni)
		if c.sni == "" {
			cfg.InsecureSkipVerify = true // no name to verify; the certificate is checked below
		}
		conn, err := tls.Dial("tcp", addr, cfg)
		if err != nil {
			t.Fatalf("SNI %q: %v", c.sni, err)
		}
		got := conn.ConnectionState().PeerCertificates[0].DNSNames[0]
		conn.Close()
		if got != c.want {
			t.Errorf("SNI %q: served %q, want %q", c.sni, got, c.want)
		}
	}
}

// Session resumption: a client that comes back to the replica that issued
// its ticket resumes; at another replica (ticket keys are per process) it
// does a full handshake, and is served all the same.
func TestSessionResumptionPerReplica(t *testing.T) {
	e := startEdge(t, edgeOptions{}, nil)
	other := startEdge(t, edgeOptions{}, func(c *config.Gateway) {
		c.TLS.CertFile, c.TLS.KeyFile, c.TLS.WatchInterval = e.certFile, e.keyFile, 0
	})
	cfg := e.ca.ClientConfig(tlsName)
	cfg.ClientSessionCache = tls.NewLRUClientSessionCache(8)
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
	resumed := func(url string) bool {
		t.Helper()
		resp, err := cl.Get(url + "/docs")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s/docs: %d", url, resp.StatusCode)
		}
		return resp.TLS.DidResume
	}
	if resumed(e.url) {
		t.Fatal("the first connection resumed")
	}
	if !resumed(e.url) {
		t.Fatal("the second connection to the same replica did not resume")
	}
	if resumed(other.url) {
		t.Fatal("a ticket of one replica resumed at another: ticket keys are shared?")
	}
}

// A known behaviour, as docs/tls.md states it: a pair written one file at
// a time, slower than two tls.watch_intervals, is refused once in between
// (the new certificate with the old key do not match, and the watcher
// has seen them so twice), counted as a refused reload (the renewal-refused
// alert fires), and taken when the key arrives; the refusal is not
// repeated. Written by rename in quick succession, it is not refused.
func TestSlowlyWrittenPairRefusedOnce(t *testing.T) {
	polls := newPollCount()
	e := startEdge(t, edgeOptions{onPoll: polls.onPoll}, func(c *config.Gateway) { c.TLS.WatchInterval = 100 * time.Millisecond })
	const refused, taken = `vendorgate_gateway_tls_certificate_reloads_total{result="error"}`, `vendorgate_gateway_tls_certificate_reloads_total{result="ok"}`
	first := e.servedSerial(t)
	next := e.ca.Issue(t, time.Now().Add(60*24*time.Hour), tlsName, "127.0.0.1")
	testcert.WriteFile(t, e.certFile, next.CertPEM) // the certificate now, the key much later
	for i := 0; i < 100 && e.metric(t, refused) < 1; i++ {
		polls.wait(t, 1) // refused at the watcher's second look
	}
	if v := e.metric(t, refused); v != 1 {
		t.Fatalf("%s %v with the certificate written and not its key, want 1", refused, v)
	}
	if s := e.servedSerial(t); s != first {
		t.Fatalf("served %s between the two writes, want the pair in force (%s)", s, first)
	}
	testcert.WriteFile(t, e.keyFile, next.KeyPEM)
	e.waitSerial(t, first)
	if r, ok := e.metric(t, refused), e.metric(t, taken); r != 1 || ok != 1 {
		t.Fatalf("refused %v, taken %v after the key arrived: want 1 and 1", r, ok)
	}
	if n := strings.Count(e.logs.String(), "tls certificate refused"); n != 1 {
		t.Fatalf("%d refusal lines, want 1:\n%s", n, e.logs.String())
	}
}
