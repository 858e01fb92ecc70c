package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// vmHWM is the peak resident memory of pid, in bytes.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc status")
	return 0
}

// dialFrom opens a connection to addr from the loopback address src.
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func readStatus(c net.Conn) (int, string, http.Header, error) {
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), resp.Header, nil
}

// Connections that send the headers of a POST announcing 1 MiB, without a
// key, made the gateway hold 1 MiB each (200 of them: over 200 MB). Now the
// real binary's peak RSS barely moves, each is answered 401 at once, an
// order still posts, a 17 KiB one is refused 413, and one peer's
// connections past max_conns_per_peer are refused with the envelope.
func TestClientBoundsOnTheBinary(t *testing.T) {
	// Not parallel: it measures the gateway's memory under many connections.
	s := newStack(t, stackOptions{})
	addr := strings.TrimPrefix(s.gwURLs[0], "http://")
	pid := s.gateways[0].cmd.Process.Pid
	_, key := s.newVendor("sandbox", "mvr")
	s.place(key, "TXBOUNDS1", "mvr") // warm: the key cached, the pools filled

	t.Run("no body memory without a key", func(t *testing.T) {
		const conns = 200
		head := "POST /api/vendor/v1/orders HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: 1048576\r\n\r\n"
		// All of the body but its last byte: a gateway that sets the
		// announced megabyte aside fills it (the pages of a buffer never
		// written to cost no RSS, so headers alone would not show it).
		body := make([]byte, 1<<20-1)
		before := vmHWM(t, pid)
		var wg sync.WaitGroup
		for i := 0; i < conns; i++ {
			// Four source addresses: 50 connections each, within the
			// per-peer bound, so that it is the body memory that is measured.
			c := dialFrom(t, fmt.Sprintf("127.0.0.%d", 20+i%4), addr)
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
				if _, err := io.WriteString(c, head); err == nil {
					_, _ = c.Write(body) // refused unread: the gateway may close first
				}
			}()
		}
		wg.Wait()
		time.Sleep(time.Second)
		grew := vmHWM(t, pid) - before
		t.Logf("peak RSS grew by %d MiB with %d connections sending 1 MiB bodies without a key", grew>>20, conns)
		if grew > 48<<20 {
			t.Errorf("peak RSS grew by %d MiB; want under 48", grew>>20)
		}
		// Headers alone are answered at once, before any body byte.
		for i := 0; i < 20; i++ {
			c := dialFrom(t, "127.0.0.24", addr)
			if _, err := io.WriteString(c, head); err != nil {
				t.Fatal(err)
			}
			status, body, _, err := readStatus(c)
			if err != nil || status != 401 || !strings.Contains(body, `"invalid_api_key"`) {
				t.Fatalf("connection %d: %v %d %s; want 401 invalid_api_key at once", i, err, status, body)
			}
		}
	})

	t.Run("order limits", func(t *testing.T) {
		big := append([]byte(strings.Repeat(" ", 17<<10)), orderBody("TXBOUNDS2", "mvr")...)
		r := s.do("POST", s.gwURLs[0]+"/api/vendor/v1/orders", key, big, map[string]string{"Idempotency-Key": "idem-bounds-2"})
		if r.status != 413 || r.errorCode() != "payload_too_large" {
			t.Fatalf("a 17 KiB order: %d %s; want 413 payload_too_large", r.status, r.body)
		}
		s.place(key, "TXBOUNDS3", "mvr") // and a normal one still posts
	})

	t.Run("connections per peer", func(t *testing.T) {
		const bound = 64 // the default
		for i := 0; i < bound; i++ {
			c := dialFrom(t, "127.0.0.30", addr)
			// One request each: the connection is accepted and stays open.
			_, _ = io.WriteString(c, "GET /api/vendor/v1/me HTTP/1.1\r\nHost: gw\r\nX-API-Key: "+key+"\r\n\r\n")
			if status, body, _, err := readStatus(c); err != nil || (status != 200 && status != 429) {
				t.Fatalf("connection %d within the bound: %v %d %s", i+1, err, status, body)
			}
		}
		over := dialFrom(t, "127.0.0.30", addr)
		_, _ = io.WriteString(over, "GET /api/vendor/v1/me HTTP/1.1\r\nHost: gw\r\nX-API-Key: "+key+"\r\n\r\n")
		status, body, hdr, err := readStatus(over)
		if err != nil || status != 429 || !strings.Contains(body, `"rate_limited"`) || hdr.Get("Retry-After") == "" || hdr.Get("X-Request-Id") == "" {
			t.Fatalf("connection %d: %v %d %s %v; want the 429 envelope", bound+1, err, status, body, hdr)
		}
		// Another address is not affected.
		other := dialFrom(t, "127.0.0.31", addr)
		_, _ = io.WriteString(other, "GET /api/vendor/v1/me HTTP/1.1\r\nHost: gw\r\nX-API-Key: "+key+"\r\n\r\n")
		if status, body, _, err := readStatus(other); err != nil || status == 429 && strings.Contains(body, "connections") {
			t.Fatalf("another address: %v %d %s", err, status, body)
		}
	})
}
