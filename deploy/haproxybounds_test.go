package deploy

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"vendorgate/config"
)

// haproxySection is the lines of one section of an HAProxy configuration
// ("frontend vendor_api_tls"), each trimmed, comments left out.
func haproxySection(t *testing.T, path, name string) []string {
	t.Helper()
	var out []string
	in := false
	for _, line := range strings.Split(string(readFile(t, path)), "\n") {
		f := strings.TrimSpace(line)
		switch {
		case f == "" || strings.HasPrefix(f, "#"):
		case !strings.HasPrefix(line, " ") && !strings.HasPrefix(line, "\t"):
			in = f == name
		case in:
			out = append(out, f)
		}
	}
	return out
}

// perSourceRule is the per-client rule of an HAProxy frontend: its
// stick-table and tcp-request lines, and the two bounds it rejects past.
func perSourceRule(t *testing.T, lines []string) (rule []string, open, rate int) {
	t.Helper()
	open, rate = -1, -1
	for _, l := range lines {
		f := strings.Fields(l)
		if f[0] != "stick-table" && f[0] != "tcp-request" {
			continue
		}
		rule = append(rule, l)
		for i := 0; i+2 < len(f); i++ {
			n, err := strconv.Atoi(f[i+2])
			if err != nil || f[i+1] != "gt" {
				continue
			}
			switch f[i] {
			case "sc0_conn_cur":
				open = n
			case "sc0_conn_rate":
				rate = n
			}
		}
	}
	return rule, open, rate
}

// The compose balancer with TLS at the gateways (haproxy-tcp.cfg) bounds
// each client at its frontends, as the gateways bound the client a PROXY
// header names: the same figures as the gateway's defaults, and a real
// HAProxy running the shipped rule refuses a client's connection past the
// open bound while another client is let through.
func TestHAProxyPerSourceBounds(t *testing.T) {
	const file = "haproxy/haproxy-tcp.cfg"
	def := config.DefaultGateway()
	var tlsRule []string
	for _, fe := range []string{"frontend vendor_api_tls", "frontend vendor_api_plain"} {
		rule, open, rate := perSourceRule(t, haproxySection(t, file, fe))
		if open != def.MaxConnsPerPeer || rate != def.MaxNewConnsPerPeer {
			t.Errorf("%s %s: rejects past %d open and %d new a second, want the gateway's max_conns_per_peer %d and max_new_conns_per_peer %d",
				file, fe, open, rate, def.MaxConnsPerPeer, def.MaxNewConnsPerPeer)
		}
		if fe == "frontend vendor_api_tls" {
			tlsRule = rule
		}
	}
	if _, err := exec.LookPath("haproxy"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("haproxy not on PATH in CI")
		}
		t.Skip("haproxy not on PATH")
	}

	// The shipped rule in front of a TCP server that holds what it accepts.
	srv, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	accepted := make(chan net.Conn, 2*def.MaxConnsPerPeer)
	go func() {
		for {
			c, err := srv.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	fl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fe := fl.Addr().String()
	fl.Close()
	cfg := filepath.Join(t.TempDir(), "haproxy.cfg")
	text := fmt.Sprintf("global\n  maxconn 1000\ndefaults\n  mode tcp\n  timeout connect 5s\n  timeout client 30s\n  timeout server 30s\nfrontend fe\n  bind %s\n  %s\n  default_backend be\nbackend be\n  server s %s\n",
		fe, strings.Join(tlsRule, "\n  "), srv.Addr())
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("haproxy", "-f", cfg, "-db")
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("haproxy:\n%s", out.String())
		}
	}()
	// HAProxy is up once it accepts (from an address of its own).
	for i := 0; ; i++ {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.11")}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", fe)
		if err == nil {
			c.Close()
			held = append(held, <-accepted)
			break
		}
		if i == 100 {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // haproxy starting
	}
	through := func(src string) bool {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", fe)
		if err != nil { // reset at once: refused
			return false
		}
		// HAProxy connects to the server once the client's connection is
		// accepted, or closes the client's: whichever comes first says.
		closed := make(chan struct{})
		go func() {
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, _ = c.Read(make([]byte, 1))
			close(closed)
		}()
		select {
		case s := <-accepted:
			held = append(held, s) // held until the test ends
			t.Cleanup(func() { c.Close() })
			return true
		case <-closed:
			c.Close()
			return false
		}
	}
	for i := range def.MaxConnsPerPeer {
		if !through("127.0.0.9") {
			t.Fatalf("connection %d of 127.0.0.9 within the bound refused", i+1)
		}
	}
	if through("127.0.0.9") {
		t.Fatalf("127.0.0.9 holding %d connections: one more let through", def.MaxConnsPerPeer)
	}
	if !through("127.0.0.10") {
		t.Fatal("another client refused")
	}
}
