package main

import (
	"bufio"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestHoleStopsForwarding: the black hole forwards both ways until hold,
// then forwards nothing while keeping the connection open.
func TestHoleStopsForwarding(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 1024)
				for {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					_, _ = c.Write(buf[:n])
				}
			}()
		}
	}()
	h, err := startHole(echo.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer h.close()
	c, err := net.Dial("tcp", h.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if _, err := c.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := r.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("before hold: %q %v", line, err)
	}
	h.hold()
	if _, err := c.Write([]byte("ping\n")); err != nil {
		t.Fatalf("write after hold: %v (the connection must stay open)", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if line, err := r.ReadString('\n'); err == nil || !os.IsTimeout(err) {
		t.Fatalf("after hold: %q %v, want a read timeout", line, err)
	}
}

// TestAnswerKinds: the codes the sweep counts apart.
func TestAnswerKinds(t *testing.T) {
	for _, c := range []struct {
		status int
		body   string
		want   string
	}{
		{200, `{"vendor_id":"x"}`, kindOK},
		{429, `{"error":{"code":"rate_limited","message":"x"}}`, kindLimited},
		{503, `{"error":{"code":"rate_limit_unavailable","message":"x"}}`, kindUnavailable},
		{503, `{"error":{"code":"request_failed","message":"x"}}`, kindShed},
		{502, `{"error":{"code":"request_failed","message":"x"}}`, kindOther},
		{0, ``, kindOther},
	} {
		if got := (answer{status: c.status, code: errorCode([]byte(c.body))}).kind(); got != c.want {
			t.Errorf("%d %s: %s, want %s", c.status, c.body, got, c.want)
		}
	}
}

// TestWriteSection replaces only what lies between the markers.
func TestWriteSection(t *testing.T) {
	p := filepath.Join(t.TempDir(), "limits.md")
	doc := "# T\n\nbefore\n\n" + beginMarker + "\nold table\n" + endMarker + "\n\nafter\n"
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeSection(p, "new table\n"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	want := "# T\n\nbefore\n\n" + beginMarker + "\nnew table\n" + endMarker + "\n\nafter\n"
	if string(b) != want {
		t.Fatalf("got\n%s\nwant\n%s", b, want)
	}
	if err := os.WriteFile(p, []byte("no markers"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeSection(p, "x"); err == nil || !strings.Contains(err.Error(), "markers") {
		t.Fatalf("a file without markers: %v", err)
	}
}
