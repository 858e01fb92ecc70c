package main

import (
	"bytes"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"vendorgate/shared/testcert"
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
	var logs syncBuf
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

// syncBuf is a log sink read while the process writes.
type syncBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
