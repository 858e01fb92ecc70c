package main

import (
	"crypto/tls"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The certificate verifies for the names the rows are reached by, the
// client and the bare proxy agree on P-256, and the bare proxy refuses a
// client without it (pinned on its side too).
func TestTLSKitPinsP256(t *testing.T) {
	k, err := makeTLSKit(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	kp, err := tls.LoadX509KeyPair(k.cert, k.key)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", bareTLSConfig(kp))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				_ = c.(*tls.Conn).Handshake()
				c.Close()
			}()
		}
	}()
	dial := func(cfg *tls.Config) (tls.ConnectionState, error) {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), cfg)
		if err != nil {
			return tls.ConnectionState{}, err
		}
		defer c.Close()
		return c.ConnectionState(), nil
	}
	for _, name := range []string{"localhost", "127.0.0.1"} {
		cfg := k.clientConfig()
		cfg.ServerName = name
		st, err := dial(cfg)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if st.CurveID != tls.CurveP256 || st.Version != tls.VersionTLS13 || st.DidResume {
			t.Errorf("%s: curve %s, version %s, resumed %v; want P-256, TLS 1.3, a full handshake", name, st.CurveID,
				tls.VersionName(st.Version), st.DidResume)
		}
	}
	x := k.clientConfig()
	x.CurvePreferences = []tls.CurveID{tls.X25519}
	if _, err := dial(x); err == nil {
		t.Error("a client offering X25519 alone was served: the bare proxy is not pinned to P-256")
	}
	conf, err := os.ReadFile(k.opensslConf)
	if err != nil || !strings.Contains(string(conf), "Groups = P-256") {
		t.Errorf("OpenSSL configuration %q (%v) does not pin P-256", conf, err)
	}
}

func TestCostOf(t *testing.T) {
	plain := func(rep int) (time.Duration, int64, bool) { return 10 * time.Millisecond, 1000, rep != 2 }
	withTLS := func(rep int) (time.Duration, int64, bool) {
		return time.Duration(12+rep) * time.Millisecond, 1000, true
	}
	c := costOf(plain, withTLS, 3) // round 3 has no plain run: left out
	if !c.ok || len(c.byRound) != 2 || math.Abs(c.byRound[0]-2) > 1e-9 || math.Abs(c.byRound[1]-3) > 1e-9 ||
		math.Abs(c.whole-2.5) > 1e-9 {
		t.Errorf("costOf = %+v, want rounds 2 and 3 µs, whole 2.5 µs", c)
	}
}

// A short -tls run measures every row and both targets.
func TestTLSSmoke(t *testing.T) {
	if _, err := exec.LookPath("wrk"); err != nil {
		if os.Getenv("CI") != "" { // .ci/run installs it: a skip there would hide the test
			t.Fatal("wrk not on PATH in CI (Debian package: wrk)")
		}
		t.Skip("wrk not installed")
	}
	doc := filepath.Join(t.TempDir(), "bench-tls.md")
	if err := os.WriteFile(doc, []byte("old\n"+tlsKeptHeading+"\nkept by hand\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"-tls", "-duration", "1s", "-reps", "1", "-warmup", "0", "-conns", "8", "-handshake-conns", "2",
		"-handshake-max", "100", "-keys", "0", "-many-keys", "2", "-tls-out", doc}
	if _, err := exec.LookPath("nginx"); err != nil {
		t.Log("nginx not installed: its rows are skipped")
	}
	out, progress := runSmoke(t, args...)
	if strings.Contains(out, "skipped: the gateway does not build") {
		if os.Getenv("CI") != "" { // CI has the whole checkout: the gateway builds there
			t.Fatalf("the gateway did not build:\n%s", out)
		}
		t.Skip("the gateway does not build here")
	}
	for _, id := range []string{rowBare, rowBareTLS, rowGateway, rowGatewayTLS} {
		if !strings.Contains(out, "| "+rowLabel(id)+" | ") || strings.Contains(out, "| "+rowLabel(id)+" | skipped") {
			t.Errorf("row %s not measured:\n%s\n%s", rowLabel(id), out, progress)
		}
	}
	if strings.Count(out, "CurveP256") < 2 {
		t.Errorf("the TLS rows did not negotiate P-256:\n%s", out)
	}
	targets := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "- TLS cost per ") && strings.Contains(line, "the gateway's") {
			targets++
		}
	}
	if strings.Contains(out, "not measured") || targets != 2 {
		t.Errorf("the targets are not both measured:\n%s", out)
	}
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), "# TLS load benchmark") || !strings.HasSuffix(string(b), tlsKeptHeading+"\nkept by hand\n") {
		t.Errorf("-tls-out not rewritten with the hand-written section kept:\n%s", b)
	}
}
