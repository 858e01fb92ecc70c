package main

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"vendorgate/shared/testcert"
	"vendorgate/shared/testlog"
)

// baseEnv is the least the gateway starts with.
func baseEnv(extra ...string) []string {
	return append([]string{"PATH=" + os.Getenv("PATH"), "GATEWAY_INTERNAL_TOKEN=cmd-test-internal-token-0123456789",
		"GATEWAY_KEY_SIGNING_SECRETS=cmd-test-key-signing-secret-0123456789abcdef", "GATEWAY_BACKEND_URL=http://127.0.0.1:1"}, extra...)
}

// -check refuses what the start refuses, naming the file: a key that does
// not match its certificate, a file that cannot be read, a key without a
// certificate; an expired certificate passes with a warning.
func TestCheckTLSFiles(t *testing.T) {
	ca := testcert.NewCA(t)
	dir := t.TempDir()
	cert, key := ca.Issue(t, time.Now().Add(time.Hour), "api.example.test").Write(t, dir, "a")
	_, otherKey := ca.Issue(t, time.Now().Add(time.Hour), "api.example.test").Write(t, dir, "b")
	oldCert, oldKey := ca.Issue(t, time.Now().Add(-time.Hour), "api.example.test").Write(t, dir, "old")
	for _, c := range []struct {
		name     string
		env      []string
		exit     int
		inStderr []string
	}{
		{"matching pair", []string{"GATEWAY_TLS_CERT_FILE=" + cert, "GATEWAY_TLS_KEY_FILE=" + key}, 0, nil},
		{"key of another certificate", []string{"GATEWAY_TLS_CERT_FILE=" + cert, "GATEWAY_TLS_KEY_FILE=" + otherKey}, 2, []string{cert, otherKey, "does not match"}},
		{"unreadable certificate", []string{"GATEWAY_TLS_CERT_FILE=" + dir, "GATEWAY_TLS_KEY_FILE=" + key}, 2, []string{dir, "is a directory"}},
		{"missing key", []string{"GATEWAY_TLS_CERT_FILE=" + cert, "GATEWAY_TLS_KEY_FILE=" + dir + "/none.pem"}, 2, []string{dir + "/none.pem", "no such file"}},
		{"key without certificate", []string{"GATEWAY_TLS_KEY_FILE=" + key}, 2, []string{key, "no certificate"}},
		{"expired certificate", []string{"GATEWAY_TLS_CERT_FILE=" + oldCert, "GATEWAY_TLS_KEY_FILE=" + oldKey}, 0, []string{"WARNING", oldCert, "expired"}},
	} {
		cmd := exec.Command(bin, "-check")
		cmd.Env = baseEnv(c.env...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != c.exit {
			t.Errorf("%s: exit %d, want %d; stderr: %s", c.name, code, c.exit, stderr.String())
		}
		for _, want := range c.inStderr {
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("%s: stderr does not say %q: %s", c.name, want, stderr.String())
			}
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// The binary serves HTTPS, names its certificate and expiry in its start
// line, and a SIGHUP swaps a renewed certificate in without a restart.
func TestSIGHUPRenewsCertificate(t *testing.T) {
	ca := testcert.NewCA(t)
	dir := t.TempDir()
	first := ca.Issue(t, time.Now().Add(30*24*time.Hour), "api.example.test")
	cert, key := first.Write(t, dir, "api")
	addr := freeAddr(t)
	cmd := exec.Command(bin)
	cmd.Env = baseEnv("GATEWAY_LISTEN="+addr, "GATEWAY_ADMIN_LISTEN="+freeAddr(t), "GATEWAY_TLS_CERT_FILE="+cert,
		"GATEWAY_TLS_KEY_FILE="+key, "GATEWAY_TLS_WATCH_INTERVAL=0")
	var logs testlog.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() })
	serial := func() string {
		t.Helper()
		for i := 0; i < 200; i++ {
			c, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, ca.ClientConfig("api.example.test"))
			if err == nil {
				defer c.Close()
				return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("no TLS handshake with the gateway:\n%s", logs.String())
		return ""
	}
	s1 := serial()
	if l := logs.String(); !strings.Contains(l, "gateway listening") || !strings.Contains(l, "api.example.test ("+cert+") expires "+first.NotAfter.UTC().Format(time.RFC3339)) {
		t.Fatalf("the start line does not name the certificate and its expiry:\n%s", l)
	}
	ca.Issue(t, time.Now().Add(60*24*time.Hour), "api.example.test").Write(t, dir, "api")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		if serial() != s1 {
			if !strings.Contains(logs.String(), "tls certificate reloaded") {
				t.Fatalf("swapped without a log line:\n%s", logs.String())
			}
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("after SIGHUP the certificate served is still the first:\n%s", logs.String())
}

// startBinary runs the gateway with env until the test ends, and returns
// its log.
func startBinary(t *testing.T, env ...string) (*exec.Cmd, *testlog.Buffer) {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = baseEnv(env...)
	logs := &testlog.Buffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("gateway log:\n%s", logs.String())
		}
	})
	return cmd, logs
}

// metricValue reads one series from the admin listener's /metrics: -1
// when it is not there.
func metricValue(t *testing.T, admin, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	return -1
}

// handshakeSerial is the serial of the certificate served for name, or
// the handshake's error.
func handshakeSerial(addr string, cfg *tls.Config) (string, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

// A renewal that no longer covers a name in force (the host of an https
// public_base_url, or a DNS name of the set it replaces) is refused, by
// SIGHUP and by the watcher: an ERROR line, the refused-reload counter
// (which VendorgateTLSCertificateRenewalRefused alerts on), and the old
// certificate still served for that name. A restart takes such a set
// (with an ERROR line for public_base_url's host), and -check refuses it.
func TestRenewalDroppingANameRefused(t *testing.T) {
	ca := testcert.NewCA(t)
	dir := t.TempDir()
	cert, key := ca.Issue(t, time.Now().Add(30*24*time.Hour), "api.example.test", "www.example.test").Write(t, dir, "api")
	addr, admin := freeAddr(t), freeAddr(t)
	cmd, logs := startBinary(t, "GATEWAY_LISTEN="+addr, "GATEWAY_ADMIN_LISTEN="+admin, "GATEWAY_TLS_CERT_FILE="+cert,
		"GATEWAY_TLS_KEY_FILE="+key, "GATEWAY_TLS_WATCH_INTERVAL=0", "GATEWAY_PUBLIC_BASE_URL=https://api.example.test")
	var first string
	for i := 0; i < 200 && first == ""; i++ {
		first, _ = handshakeSerial(addr, ca.ClientConfig("api.example.test"))
		if first == "" {
			time.Sleep(50 * time.Millisecond)
		}
	}
	if first == "" {
		t.Fatal("no TLS handshake with the gateway")
	}
	const refused = `vendorgate_gateway_tls_certificate_reloads_total{result="error"}`
	for i, c := range []struct {
		why   string
		names []string
	}{
		{"another name altogether", []string{"other.example.test"}},
		{"public_base_url's host dropped", []string{"www.example.test"}},
		{"a name of the set in force dropped", []string{"api.example.test"}},
	} {
		ca.Issue(t, time.Now().Add(60*24*time.Hour), c.names...).Write(t, dir, "api")
		if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		for j := 0; j < 200 && metricValue(t, admin, refused) < float64(i+1); j++ {
			time.Sleep(25 * time.Millisecond)
		}
		if got := metricValue(t, admin, refused); got != float64(i+1) {
			t.Fatalf("%s: %s is %v after SIGHUP, want %d", c.why, refused, got, i+1)
		}
		for _, name := range []string{"api.example.test", "www.example.test"} {
			if s, err := handshakeSerial(addr, ca.ClientConfig(name)); err != nil || s != first {
				t.Fatalf("%s: %s served serial %s (err %v), want the set in force (%s)", c.why, name, s, err, first)
			}
		}
	}
	if n := strings.Count(logs.String(), `"level":"ERROR","msg":"tls certificate refused; the certificate in force stays"`); n != 3 {
		t.Errorf("%d ERROR lines for 3 refused renewals", n)
	}
	if !strings.Contains(logs.String(), "no longer covers api.example.test") {
		t.Errorf("the refusal does not name the name dropped:\n%s", logs.String())
	}

	// A renewal that keeps every name and adds one is taken.
	ca.Issue(t, time.Now().Add(60*24*time.Hour), "api.example.test", "www.example.test", "new.example.test").Write(t, dir, "api")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if s, err := handshakeSerial(addr, ca.ClientConfig("new.example.test")); err == nil && s != first {
			break
		}
		if i == 200 {
			t.Fatal("a renewal keeping every name and adding one was not taken")
		}
		time.Sleep(25 * time.Millisecond)
	}

	// -check refuses a pair for another name than public_base_url's host;
	// a start serves it.
	other, otherKey := ca.Issue(t, time.Now().Add(60*24*time.Hour), "other.example.test").Write(t, dir, "other")
	env := []string{"GATEWAY_TLS_CERT_FILE=" + other, "GATEWAY_TLS_KEY_FILE=" + otherKey, "GATEWAY_PUBLIC_BASE_URL=https://api.example.test"}
	check := exec.Command(bin, "-check")
	check.Env = baseEnv(env...)
	out, err := check.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "api.example.test") {
		t.Errorf("-check on a pair not covering public_base_url's host: %v\n%s", err, out)
	}
	addr2 := freeAddr(t)
	_, logs2 := startBinary(t, append(env, "GATEWAY_LISTEN="+addr2, "GATEWAY_ADMIN_LISTEN="+freeAddr(t), "GATEWAY_TLS_WATCH_INTERVAL=0")...)
	for i := 0; ; i++ {
		if _, err := handshakeSerial(addr2, ca.ClientConfig("other.example.test")); err == nil {
			break
		}
		if i == 200 {
			t.Fatalf("a restart did not take a valid pair for another name:\n%s", logs2.String())
		}
		time.Sleep(25 * time.Millisecond)
	}
	if !strings.Contains(logs2.String(), `"level":"ERROR"`) || !strings.Contains(logs2.String(), `"uncovered":"api.example.test"`) {
		t.Errorf("a start with a pair not covering public_base_url's host says nothing:\n%s", logs2.String())
	}
}

// probeQueries are the /readyz queries the shipped balancers and
// readiness probes ask a gateway (HAProxy's http-check, Kubernetes'
// readinessProbe), read from the files under deploy/, with the file each
// came from.
func probeQueries(t *testing.T) map[string]string {
	t.Helper()
	re := regexp.MustCompile(`(?:\buri|\bpath:)\s+(/readyz\?\S*exclude=\S+)`)
	found := map[string]string{}
	err := filepath.WalkDir("../../deploy", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(path, ".go") || strings.HasSuffix(path, ".md") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			found[path] = m[1]
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"haproxy/haproxy.cfg", "haproxy/haproxy-tcp.cfg", "k8s/base/gateway.yaml"} {
		if _, ok := found["../../deploy/"+want]; !ok {
			t.Fatalf("no /readyz probe query found in deploy/%s (found %v)", want, found)
		}
	}
	return found
}

// With ACME and the CA unreachable (fresh storage, the directory on a
// closed port), no certificate covers the configured domain: every
// handshake for it would fail, so /readyz fails its "tls" check, under
// every query the shipped balancers and probes ask. The start line says
// TLS is served by ACME and for which domains.
func TestACMEWithoutCertificateNotReady(t *testing.T) {
	closed := freeAddr(t) // nothing listens there
	addr, admin := freeAddr(t), freeAddr(t)
	_, logs := startBinary(t, "GATEWAY_LISTEN="+addr, "GATEWAY_ADMIN_LISTEN="+admin, "GATEWAY_TLS_WATCH_INTERVAL=0",
		"GATEWAY_TLS_ACME_DOMAINS=api.example.test", "GATEWAY_TLS_ACME_CA=https://"+closed+"/dir",
		"GATEWAY_TLS_ACME_STORAGE="+filepath.Join(t.TempDir(), "acme"), "GATEWAY_PUBLIC_BASE_URL=https://api.example.test")
	get := func(query string) (int, string) {
		resp, err := http.Get("http://" + admin + query)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for i := 0; ; i++ {
		if code, _ := get("/healthz"); code == http.StatusOK {
			break
		}
		if i == 200 {
			t.Fatal("the admin listener never answered")
		}
		time.Sleep(25 * time.Millisecond)
	}
	if _, err := handshakeSerial(addr, &tls.Config{ServerName: "api.example.test", InsecureSkipVerify: true}); err == nil {
		t.Fatal("a handshake for the domain succeeded with the CA unreachable: the test's premise does not hold")
	}
	for file, q := range probeQueries(t) {
		code, body := get(q + "&verbose")
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "tls") || !strings.Contains(body, "api.example.test") {
			t.Errorf("%s's probe %s: %d, want 503 naming the tls check and the domain:\n%s", file, q, code, body)
		}
	}
	line := ""
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"msg":"gateway listening"`) {
			line = l
		}
	}
	if !strings.Contains(line, `"tls":"acme api.example.test`) {
		t.Errorf("the start line does not say TLS is served by ACME for its domain: %s", line)
	}
}
