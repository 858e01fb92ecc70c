package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"vendorgate/shared/testcert"
)

// TestCheckWarnsHTTPBaseURLUnderTLS: -check accepts a configuration that
// serves HTTPS with an http:// public_base_url (exit 0) and prints a
// warning naming the setting; with https:// it prints none.
func TestCheckWarnsHTTPBaseURLUnderTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := testcert.NewCA(t).Issue(t, time.Now().Add(time.Hour), "localhost").Write(t, dir, "edge")
	file := filepath.Join(dir, "gw.yaml")
	if err := os.WriteFile(file, []byte(base+"tls: {cert_file: "+certFile+", key_file: "+keyFile+"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		url  string
		warn bool
	}{{"http://localhost:8443", true}, {"https://localhost:8443", false}} {
		env := testEnv()
		env["GATEWAY_PUBLIC_BASE_URL"] = tc.url
		code, stderr := runGateway(t, file, env, "-check")
		warned := strings.Contains(stderr, "gateway: WARNING: public_base_url: \""+tc.url+"\" is http://")
		if code != 0 || warned != tc.warn {
			t.Errorf("public_base_url %s under TLS: -check exit %d, warned %v (want %v):\n%s", tc.url, code, warned, tc.warn, stderr)
		}
	}
}
