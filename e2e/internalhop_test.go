package e2e

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"vendorgate/shared/testcert"
	"vendorgate/shared/testredis"
	"vendorgate/shared/wire"
)

// hopFiles are the internal hop's certificates, made by a private CA for
// the backend and another for the gateways' client certificates.
type hopFiles struct {
	backendCA, backendCert, backendKey string
	clientCA, clientCert, clientKey    string
	clientPair                         tls.Certificate
	backendPool                        *testcert.CA
}

func newHopFiles(t *testing.T) hopFiles {
	t.Helper()
	dir := t.TempDir()
	backendCA, clientCA := testcert.NewCA(t), testcert.NewCA(t)
	var f hopFiles
	f.backendCA, f.clientCA = filepath.Join(dir, "backend-ca.pem"), filepath.Join(dir, "client-ca.pem")
	backendCA.WriteRoot(t, f.backendCA)
	clientCA.WriteRoot(t, f.clientCA)
	f.backendCert, f.backendKey = backendCA.Issue(t, time.Now().Add(time.Hour), "127.0.0.1").Write(t, dir, "backend")
	leaf := clientCA.IssueClient(t, time.Now().Add(time.Hour), "gateway")
	f.clientCert, f.clientKey = leaf.Write(t, dir, "gateway-client")
	pair, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	f.clientPair, f.backendPool = pair, backendCA
	return f
}

// gatewayAlso starts one more gateway on s's backend with env over the
// stack's own settings, and waits for it to be live.
func (s *stack) gatewayAlso(t *testing.T, env map[string]string) (base string, p *proc) {
	t.Helper()
	port, admin := testredis.FreePort(t), "127.0.0.1:"+strconv.Itoa(testredis.FreePort(t))
	genv := map[string]string{
		"GATEWAY_LISTEN":              "127.0.0.1:" + strconv.Itoa(port),
		"GATEWAY_ADMIN_LISTEN":        admin,
		"GATEWAY_BACKEND_URL":         s.backendURL,
		"GATEWAY_INTERNAL_TOKEN":      internalToken,
		"GATEWAY_KEY_SIGNING_SECRETS": signingSecret,
	}
	for k, v := range env {
		genv[k] = v
	}
	p = startProc(t, "gateway", genv)
	waitHTTP(t, "http://"+admin+"/healthz", p)
	return "http://127.0.0.1:" + strconv.Itoa(port), p
}

// waitLog waits for p's log to contain want; the deadline is the failure
// signal for a line that never comes, not a measure of speed.
func waitLog(t *testing.T, p *proc, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if strings.Contains(p.logText(), want) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s never logged %q:\n%s", p.name, want, p.logText())
}

// The gateway calls a backend that serves TLS with a certificate of a
// private CA: trusted through backend_tls.ca_file, a vendor read is served;
// without it the backend's certificate is refused, the read answers 503
// request_failed and the log says what to set.
func TestInternalHopTLSPrivateCA(t *testing.T) {
	t.Parallel()
	f := newHopFiles(t)
	s := newStack(t, stackOptions{backendHTTPS: true,
		backendEnv: map[string]string{"BACKEND_TLS_CERT_FILE": f.backendCert, "BACKEND_TLS_KEY_FILE": f.backendKey},
		gatewayEnv: map[string]string{"GATEWAY_BACKEND_TLS_CA_FILE": f.backendCA}})
	if !strings.Contains(s.backend.logText(), `"tls":true`) {
		t.Fatalf("the backend's start line does not say TLS is on:\n%s", s.backend.logText())
	}
	vendorID, key := s.newVendor("sandbox", "mvr")

	r := do(t, "GET", s.gwURLs[0]+"/api/vendor/v1/me", key, nil, nil)
	if r.status != 200 || vendorOf(r) != vendorID {
		t.Fatalf("vendor read over the TLS hop: %d %s", r.status, r.body)
	}
	// An order placed and read back: a POST with its body crosses the hop.
	r = do(t, "GET", s.gwURLs[0]+"/api/vendor/v1/orders", key, nil, nil)
	if r.status != 200 {
		t.Fatalf("order list over the TLS hop: %d %s", r.status, r.body)
	}

	t.Run("without the CA the backend's certificate is refused", func(t *testing.T) {
		gw, p := s.gatewayAlso(t, nil)
		r := do(t, "GET", gw+"/api/vendor/v1/me", key, nil, nil)
		if r.status != 503 || r.errorCode() != "request_failed" {
			t.Fatalf("got %d %s, want 503 request_failed", r.status, r.body)
		}
		waitLog(t, p, "the backend's certificate is not trusted: set backend_tls.ca_file")
		if strings.Contains(p.logText(), key) {
			t.Fatal("the gateway's log holds the API key")
		}
	})

	t.Run("plain http to the TLS listener fails", func(t *testing.T) {
		gw, p := s.gatewayAlso(t, map[string]string{"GATEWAY_BACKEND_URL": strings.Replace(s.backendURL, "https://", "http://", 1)})
		r := do(t, "GET", gw+"/api/vendor/v1/me", key, nil, nil)
		if r.status != 503 || r.errorCode() != "request_failed" {
			t.Fatalf("got %d %s, want 503 request_failed", r.status, r.body)
		}
		waitLog(t, p, `"msg":"dependency unavailable","dependency":"backend `)
	})
}

// A backend with tls.client_ca_file requires a client certificate: a
// gateway without one is refused in the handshake (503 request_failed, a
// log line saying what to set), one with it is served; the internal token
// is still required of a client that has the certificate.
func TestInternalHopMutualTLS(t *testing.T) {
	t.Parallel()
	f := newHopFiles(t)
	s := newStack(t, stackOptions{backendHTTPS: true,
		backendEnv: map[string]string{"BACKEND_TLS_CERT_FILE": f.backendCert, "BACKEND_TLS_KEY_FILE": f.backendKey,
			"BACKEND_TLS_CLIENT_CA_FILE": f.clientCA},
		gatewayEnv: map[string]string{"GATEWAY_BACKEND_TLS_CA_FILE": f.backendCA,
			"GATEWAY_BACKEND_TLS_CERT_FILE": f.clientCert, "GATEWAY_BACKEND_TLS_KEY_FILE": f.clientKey}})
	if !strings.Contains(s.backend.logText(), `"client_certificates":true`) {
		t.Fatalf("the backend's start line does not say client certificates are required:\n%s", s.backend.logText())
	}
	vendorID, key := s.newVendor("sandbox", "mvr")

	t.Run("with the client certificate", func(t *testing.T) {
		r := do(t, "GET", s.gwURLs[0]+"/api/vendor/v1/me", key, nil, nil)
		if r.status != 200 || vendorOf(r) != vendorID {
			t.Fatalf("got %d %s, want 200", r.status, r.body)
		}
		// An order's body, its polls and its report download (the stream
		// pool) all cross the hop.
		o := s.poll(key, s.place(key, "D7654321", "mvr").OrderID, 20*time.Second, func(o order) bool { return o.Final })
		if o.Status != "completed" || len(o.Services) != 1 || o.Services[0].FileURL == nil {
			t.Fatalf("final order over mutual TLS: %+v", o)
		}
		pdf := s.do("GET", *o.Services[0].FileURL, key, nil, nil)
		if pdf.status != 200 || !strings.HasPrefix(string(pdf.body), "%PDF-") {
			t.Fatalf("report download over mutual TLS: %d %.40q", pdf.status, pdf.body)
		}
	})

	t.Run("without a client certificate", func(t *testing.T) {
		gw, p := s.gatewayAlso(t, map[string]string{"GATEWAY_BACKEND_TLS_CA_FILE": f.backendCA})
		r := do(t, "GET", gw+"/api/vendor/v1/me", key, nil, nil)
		if r.status != 503 || r.errorCode() != "request_failed" {
			t.Fatalf("got %d %s, want 503 request_failed", r.status, r.body)
		}
		waitLog(t, p, "the backend refused this gateway's client certificate")
	})

	t.Run("a client certificate of another CA", func(t *testing.T) {
		other := testcert.NewCA(t).IssueClient(t, time.Now().Add(time.Hour), "intruder")
		cert, keyFile := other.Write(t, t.TempDir(), "intruder")
		gw, _ := s.gatewayAlso(t, map[string]string{"GATEWAY_BACKEND_TLS_CA_FILE": f.backendCA,
			"GATEWAY_BACKEND_TLS_CERT_FILE": cert, "GATEWAY_BACKEND_TLS_KEY_FILE": keyFile})
		r := do(t, "GET", gw+"/api/vendor/v1/me", key, nil, nil)
		if r.status != 503 || r.errorCode() != "request_failed" {
			t.Fatalf("got %d %s, want 503 request_failed", r.status, r.body)
		}
	})

	t.Run("the internal token is still required", func(t *testing.T) {
		cfg := f.backendPool.ClientConfig("127.0.0.1")
		cfg.Certificates = []tls.Certificate{f.clientPair}
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 10 * time.Second}
		defer client.CloseIdleConnections()
		get := func(path, token string) (int, string) {
			req, _ := http.NewRequest("GET", s.backendURL+path, nil)
			if token != "" {
				req.Header.Set(wire.HeaderInternalToken, token)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		for _, path := range []string{wire.ReadyPath, "/api/vendor/v1/me"} {
			for _, token := range []string{"", "not-the-internal-token-at-all"} {
				if st, body := get(path, token); st != 401 || !strings.Contains(body, "invalid_api_key") {
					t.Errorf("%s with token %q over mutual TLS: %d %s, want 401 invalid_api_key", path, token, st, body)
				}
			}
		}
		if st, body := get(wire.ReadyPath, internalToken); st != 200 {
			t.Fatalf("readiness with the token over mutual TLS: %d %s", st, body)
		}
		// A gateway with the certificate and a wrong token is refused too.
		gw, _ := s.gatewayAlso(t, map[string]string{"GATEWAY_BACKEND_TLS_CA_FILE": f.backendCA,
			"GATEWAY_BACKEND_TLS_CERT_FILE": f.clientCert, "GATEWAY_BACKEND_TLS_KEY_FILE": f.clientKey,
			"GATEWAY_INTERNAL_TOKEN": "a-different-internal-token-0123"})
		if r := do(t, "GET", gw+"/api/vendor/v1/me", key, nil, nil); r.status == 200 {
			t.Fatalf("a gateway with a wrong internal token was served over mutual TLS: %s", r.body)
		}
	})
}

// -check and a start refuse the hop's files that cannot be used, naming
// the file, with exit 2 (a configuration error) on both binaries.
func TestInternalHopTLSFilesRefused(t *testing.T) {
	t.Parallel()
	f := newHopFiles(t)
	missing := filepath.Join(t.TempDir(), "nope.pem")
	gwBase := []string{"GATEWAY_INTERNAL_TOKEN=" + internalToken, "GATEWAY_KEY_SIGNING_SECRETS=" + signingSecret,
		"GATEWAY_BACKEND_URL=https://127.0.0.1:1", "GATEWAY_LISTEN=127.0.0.1:0", "GATEWAY_ADMIN_LISTEN=127.0.0.1:0"}
	beBase := []string{"BACKEND_INTERNAL_TOKEN=" + internalToken, "BACKEND_KEY_SIGNING_SECRETS=" + signingSecret,
		"BACKEND_ADMIN_TOKEN=" + adminToken, "BACKEND_LISTEN=127.0.0.1:0", "BACKEND_ADMIN_LISTEN=127.0.0.1:0",
		"BACKEND_DATABASE=" + filepath.Join(t.TempDir(), "db"), "BACKEND_REPORTS_DIR=" + t.TempDir()}
	for _, c := range []struct {
		bin  string
		env  []string
		want string
	}{
		{"gateway", append(gwBase, "GATEWAY_BACKEND_TLS_CA_FILE="+missing), "backend_tls: ca_file " + missing + ": no such file"},
		{"gateway", append(gwBase, "GATEWAY_BACKEND_TLS_CA_FILE="+f.backendKey), "backend_tls: ca_file " + f.backendKey + ": no PEM certificate"},
		{"gateway", append(gwBase, "GATEWAY_BACKEND_TLS_CERT_FILE="+f.clientCert, "GATEWAY_BACKEND_TLS_KEY_FILE="+f.backendKey),
			"cert_file " + f.clientCert + " and key_file " + f.backendKey},
		{"backend", append(beBase, "BACKEND_TLS_CERT_FILE="+f.backendCert, "BACKEND_TLS_KEY_FILE="+f.clientKey),
			"cert_file " + f.backendCert + " and key_file " + f.clientKey},
		{"backend", append(beBase, "BACKEND_TLS_CERT_FILE="+f.backendCert, "BACKEND_TLS_KEY_FILE="+f.backendKey, "BACKEND_TLS_CLIENT_CA_FILE="+missing),
			"tls: client_ca_file " + missing + ": no such file"},
	} {
		for _, args := range [][]string{{"-check"}, nil} {
			// A start that is not refused would serve: the context ends it.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			cmd := exec.CommandContext(ctx, filepath.Join(binDir, c.bin), args...)
			cmd.Env = append(os.Environ(), c.env...)
			out, err := cmd.CombinedOutput()
			cancel()
			code := -1
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			}
			if code != 2 || !strings.Contains(string(out), c.want) {
				t.Errorf("%s %v: exit %d, %s; want exit 2 saying %q", c.bin, args, code, out, c.want)
			}
		}
	}
}
