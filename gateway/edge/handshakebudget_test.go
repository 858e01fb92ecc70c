package edge

import (
	"bufio"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"vendorgate/config"
	"vendorgate/shared/testcert"
)

// stallConn lets a TLS client send its ClientHello and then never read
// the server's answer: the server has done its handshake work and waits
// for the client's Finished until read_timeout.
type stallConn struct {
	net.Conn
	stop  <-chan struct{}
	delay time.Duration // before the ClientHello
	wrote bool
}

func (c *stallConn) Write(p []byte) (int, error) {
	if !c.wrote {
		c.wrote = true
		time.Sleep(c.delay)
	}
	return c.Conn.Write(p)
}

func (c *stallConn) Read([]byte) (int, error) {
	<-c.stop
	return 0, net.ErrClosed
}

// The handshake budget: clients that connect, send their ClientHello
// 300 ms later (as a slow client does: the connection's read deadline
// runs from the connect) and stall fill tls.max_handshakes; the gauge of
// handshakes in progress reaches the setting and never exceeds it,
// handshakes past it that find no room within half of read_timeout are
// closed and counted (a place given later went to a handshake whose
// deadline had passed, which then failed as a timeout: 0 were counted),
// and a request on a connection established before the flood is
// answered throughout.
func TestHandshakeBudget(t *testing.T) {
	const maxHandshakes = 3
	e := startEdge(t, edgeOptions{}, func(c *config.Gateway) {
		c.TLS.MaxHandshakes, c.TLS.MaxHandshakesPerSecond = maxHandshakes, 50
		c.ReadTimeout = time.Second
		c.MaxConnsPerPeer, c.MaxNewConnsPerPeer = 1000, 1000
	})
	established, err := e.handshake(e.ca.ClientConfig(tlsName))
	if err != nil {
		t.Fatal(err)
	}
	defer established.Close()
	br := bufio.NewReader(established)
	ask := func() int {
		t.Helper()
		_ = established.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := established.Write([]byte("GET /docs HTTP/1.1\r\nHost: " + tlsName + "\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_, _ = bufio.NewReader(resp.Body).WriteTo(discard{})
		return resp.StatusCode
	}
	if code := ask(); code != http.StatusOK {
		t.Fatalf("GET /docs before the flood: %d", code)
	}

	// Connections that send no ClientHello hold no place.
	for range 2 * maxHandshakes {
		c, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	if c, err := e.handshake(e.ca.ClientConfig(tlsName)); err != nil {
		t.Fatalf("a handshake beside %d connections that sent nothing: %v", 2*maxHandshakes, err)
	} else {
		c.Close()
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	const stallers = 24
	for range stallers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", e.addr)
			if err != nil {
				return
			}
			defer c.Close()
			tc := tls.Client(&stallConn{Conn: c, stop: stop, delay: 300 * time.Millisecond}, &tls.Config{ServerName: tlsName, InsecureSkipVerify: true})
			_ = tc.Handshake() // sends the ClientHello, then waits for stop
		}()
	}
	defer func() { close(stop); wg.Wait() }()

	const gauge = "vendorgate_gateway_tls_handshakes_in_progress"
	peak, answered := 0.0, 0
	for i := 0; i < 150 && (peak < maxHandshakes || answered < 3); i++ {
		v := e.metric(t, gauge)
		if v < 0 {
			t.Fatalf("no %s on /metrics", gauge)
		}
		if v > maxHandshakes {
			t.Fatalf("%s %v, over tls.max_handshakes %d", gauge, v, maxHandshakes)
		}
		peak = max(peak, v)
		if peak == maxHandshakes {
			if code := ask(); code != http.StatusOK {
				t.Fatalf("GET /docs on the established connection with the budget full: %d", code)
			}
			answered++
		}
		time.Sleep(10 * time.Millisecond)
	}
	if peak != maxHandshakes || answered < 3 {
		t.Fatalf("%s peaked at %v (want %d: the stalled handshakes fill the budget); %d answers with it full", gauge, peak, maxHandshakes, answered)
	}
	over := "vendorgate_gateway_tls_handshakes_over_budget_total"
	for i := 0; i < 300 && e.metric(t, over) <= 0; i++ {
		v := e.metric(t, gauge)
		if v > maxHandshakes {
			t.Fatalf("%s %v, over tls.max_handshakes %d", gauge, v, maxHandshakes)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if v := e.metric(t, over); v <= 0 {
		t.Fatalf("%s %v: no handshake found the budget full past half of read_timeout", over, v)
	}
	if code := ask(); code != http.StatusOK {
		t.Fatalf("GET /docs after the flood: %d", code)
	}
	if strings.Contains(e.logs.String(), "RSA key") {
		t.Fatalf("an RSA warning for an ECDSA certificate:\n%s", e.logs.String())
	}
}

// An RSA certificate is served, with a warning at start naming its cost.
func TestRSAKeyWarned(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: tlsName}, DNSNames: []string{tlsName},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "rsa.pem"), filepath.Join(dir, "rsa-key.pem")
	testcert.WriteFile(t, certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	testcert.WriteFile(t, keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	e := startEdge(t, edgeOptions{}, func(c *config.Gateway) { c.TLS.CertFile, c.TLS.KeyFile = certFile, keyFile })
	c, err := e.handshake(&tls.Config{ServerName: tlsName, InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	logs := e.logs.String()
	if !strings.Contains(logs, `"level":"WARN","msg":"tls certificate has an RSA key: a handshake costs about 1.1 ms`) || !strings.Contains(logs, certFile) {
		t.Fatalf("no warning for an RSA key:\n%s", logs)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
