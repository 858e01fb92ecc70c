package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"vendorgate/shared/testredis"
)

var tryACMECurl = regexp.MustCompile(`curl --cacert (\S+) --resolve (\S+) (https://\S+)\n`)

// TestTryACMEScript: docs/tls.md's "Try ACME locally", scripts/try-acme.sh
// as a newcomer runs it: the gateway gets a certificate for gateway.test
// from Pebble (pebble-challtestsrv as its DNS), and the curl line it
// prints answers with Pebble's root as --cacert (and fails without it).
// Ctrl-C exits 0 and stops all three processes.
func TestTryACMEScript(t *testing.T) {
	t.Parallel()
	for _, bin := range []string{"pebble", "pebble-challtestsrv", "openssl", "curl"} {
		if _, err := exec.LookPath(bin); err != nil {
			if os.Getenv("CI") != "" { // .ci/run installs them: a skip there would hide the test
				t.Fatalf("%s not on PATH", bin)
			}
			t.Skipf("%s not on PATH", bin)
		}
	}
	port := func() string { return "127.0.0.1:" + strconv.Itoa(testredis.FreePort(t)) }
	dir := t.TempDir()
	env := map[string]string{
		"BIN_DIR": binDir, "TRY_ACME_DIR": dir,
		"GATEWAY_LISTEN": port(), "GATEWAY_ADMIN_LISTEN": port(),
		"PEBBLE_LISTEN": port(), "PEBBLE_MGMT_LISTEN": port(),
		"CHALLTESTSRV_DNS": port(), "CHALLTESTSRV_MGMT": port(),
	}
	r := startScriptFile(t, "try-acme.sh", env, false)
	var out string
	deadline := time.Now().Add(120 * time.Second)
	for out == "" {
		if o, ok := upTo(r.stdout.String(), "Ctrl-C stops"); ok {
			out = o
			break
		}
		select {
		case <-r.done:
			t.Fatalf("try-acme.sh ended (%v) before its curl line:\n%s\nstderr:\n%s", r.err, r.stdout.String(), r.stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no curl line from try-acme.sh within 120s:\n%s\nstderr:\n%s", r.stdout.String(), r.stderr.String())
		}
	}
	m := tryACMECurl.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no curl line in:\n%s", out)
	}
	cacert, resolve, url := m[1], m[2], m[3]
	if want := "gateway.test:" + env["GATEWAY_LISTEN"][strings.LastIndex(env["GATEWAY_LISTEN"], ":")+1:] + ":127.0.0.1"; resolve != want {
		t.Fatalf("--resolve %s, want %s", resolve, want)
	}
	if filepath.Dir(cacert) != dir {
		t.Fatalf("--cacert %s, not under TRY_ACME_DIR %s", cacert, dir)
	}

	// The line as printed, run by curl.
	body, err := exec.Command("curl", "-sS", "--fail", "--cacert", cacert, "--resolve", resolve, url).Output()
	if err != nil {
		t.Fatalf("the printed curl line: %v", err)
	}
	if !strings.Contains(string(body), "openapi") {
		t.Fatalf("the printed curl line answered %.300q, want /docs", body)
	}
	// Without Pebble's root, curl refuses the certificate (exit 60): the
	// --cacert is what makes it answer.
	var ee *exec.ExitError
	if err := exec.Command("curl", "-sS", "-o", os.DevNull, "--resolve", resolve, url).Run(); !errors.As(err, &ee) || ee.ExitCode() != 60 {
		t.Fatalf("curl without --cacert: %v, want exit 60 (certificate not trusted)", err)
	}
	// The certificate is the ACME one for gateway.test, signed under
	// Pebble's root.
	rootPEM, err := os.ReadFile(cacert)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(rootPEM) {
		t.Fatalf("%s holds no certificate", cacert)
	}
	c, err := tls.Dial("tcp", env["GATEWAY_LISTEN"], &tls.Config{ServerName: "gateway.test", RootCAs: roots})
	if err != nil {
		t.Fatal(err)
	}
	leaf := c.ConnectionState().PeerCertificates[0]
	c.Close()
	if len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != "gateway.test" || !strings.Contains(leaf.Issuer.CommonName, "Pebble") {
		t.Fatalf("served %v issued by %q, want gateway.test from Pebble", leaf.DNSNames, leaf.Issuer.CommonName)
	}

	r.stop(t) // Ctrl-C: exit 0
	for _, name := range []string{"GATEWAY_LISTEN", "PEBBLE_LISTEN", "CHALLTESTSRV_MGMT"} {
		if c, err := net.DialTimeout("tcp", env[name], time.Second); err == nil {
			c.Close()
			t.Errorf("%s (%s) still answers after try-acme.sh stopped", name, env[name])
		}
	}
}
