package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// rawExchange writes raw on a fresh connection to base (http://host:port)
// in one write and reads n answers. The read deadline is the failure
// signal for a server that never answers, not a measure of speed.
func rawExchange(t *testing.T, base, raw string, n int, deadline time.Duration) []response {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(deadline))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	var out []response
	for i := 0; i < n; i++ {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("answer %d of %d: %v", i+1, n, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		out = append(out, response{status: resp.StatusCode, header: resp.Header, body: body})
	}
	return out
}

// vendorOf is the vendor_id of a GET /me answer.
func vendorOf(r response) string {
	var v struct {
		VendorID string `json:"vendor_id"`
	}
	_ = json.Unmarshal(r.body, &v)
	return v.VendorID
}

// remaining is r in the RateLimit header of the limit named name.
func remaining(t *testing.T, r response, name string) int {
	t.Helper()
	m := regexp.MustCompile(`"` + name + `";r=(\d+)`).FindStringSubmatch(r.header.Get("RateLimit"))
	if m == nil {
		t.Fatalf("no RateLimit for %s: %v", name, r.header)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// What an attacker sent against the edge, against the real binaries.
func TestEdgeRequestShapes(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	vendorA, keyA := s.newVendor("sandbox", "mvr")
	vendorB, keyB := s.newVendor("sandbox", "mvr")
	gw := s.gwURLs[0]
	me := gw + "/api/vendor/v1/me"

	// One vendor's absolute-form https targets are served like any other
	// request and leave the backend's breaker closed for every vendor.
	t.Run("absolute-form https targets", func(t *testing.T) {
		for _, target := range []string{"https://x/api/vendor/v1/me", "HTTPS://x/api/vendor/v1/me", "https:///api/vendor/v1/me"} {
			one := "GET " + target + " HTTP/1.1\r\nHost: x\r\nX-API-Key: " + keyA + "\r\n\r\n"
			for i, r := range rawExchange(t, gw, strings.Repeat(one, 5), 5, 10*time.Second) {
				if r.status != 200 || vendorOf(r) != vendorA {
					t.Fatalf("%s, request %d: %d %s", target, i+1, r.status, r.body)
				}
			}
		}
		if r := s.do("GET", me, keyB, nil, nil); r.status != 200 || vendorOf(r) != vendorB {
			t.Fatalf("vendor b: %d %s", r.status, r.body)
		}
		if r := do(t, "GET", s.gwAdmin[0]+"/readyz", "", nil, nil); r.status != 200 {
			t.Fatalf("/readyz: %d %s", r.status, r.body)
		}
	})

	// Headers the gateway accepts (under its 8 KiB) reach the backend and
	// are answered by it; past them, 431 before any limit is charged.
	t.Run("headers between 4 and 8 KiB", func(t *testing.T) {
		var many strings.Builder
		for i := range 300 {
			fmt.Fprintf(&many, "X-Pad-%03d: v\r\n", i)
		}
		for _, c := range []struct {
			name, target, extra string
		}{
			{"300 headers", "/api/vendor/v1/me", many.String()},
			{"one 4.5 KB header", "/api/vendor/v1/me", "X-Pad: " + strings.Repeat("a", 4500) + "\r\n"},
			{"6 KB query", "/api/vendor/v1/me?pad=" + strings.Repeat("q", 6000), ""},
		} {
			raw := "GET " + c.target + " HTTP/1.1\r\nHost: x\r\nX-API-Key: " + keyB + "\r\n" + c.extra + "\r\n"
			if len(raw) < 4<<10 || len(raw) > 8<<10-512 {
				t.Fatalf("%s: %d bytes, not between 4 and 8 KiB", c.name, len(raw))
			}
			if r := rawExchange(t, gw, raw, 1, 10*time.Second)[0]; r.status != 200 || vendorOf(r) != vendorB {
				t.Errorf("%s (%d bytes): %d %s", c.name, len(raw), r.status, r.body)
			}
		}
	})
	t.Run("headers past 8 KiB", func(t *testing.T) {
		before := remaining(t, s.do("GET", me, keyB, nil, nil), "reads")
		raw := "GET /api/vendor/v1/me HTTP/1.1\r\nHost: x\r\nX-API-Key: " + keyB + "\r\nX-Pad: " + strings.Repeat("a", 8<<10) + "\r\n\r\n"
		r := rawExchange(t, gw, raw, 1, 10*time.Second)[0]
		if r.status != 431 || r.errorCode() != "request_failed" {
			t.Fatalf("%d %s, want 431", r.status, r.body)
		}
		after := remaining(t, s.do("GET", me, keyB, nil, nil), "reads")
		if after != before-1 {
			t.Fatalf("reads remaining %d before, %d after: the 431 was charged", before, after)
		}
	})

	// A request with bare-LF line endings is refused at once, by the
	// gateway and by the backend alike, not after the read timeout.
	t.Run("bare LF", func(t *testing.T) {
		for _, base := range []string{gw, s.backendURL} {
			for _, raw := range []string{
				"GET /api/vendor/v1/me HTTP/1.1\nHost: x\n\n",
				"GET /api/vendor/v1/me HTTP/1.1\nHost: x\nX-API-Key: " + keyB + "\n\n",
				"GET /api/vendor/v1/me HTTP/1.1\r\nHost: x\r\n\n",
				"GET /api/vendor/v1/me HTTP/1.1\r\nHost: x\n\r\n",
			} {
				start := time.Now()
				r := rawExchange(t, base, raw, 1, 5*time.Second)[0]
				if r.status != 400 || r.errorCode() == "" {
					t.Errorf("%s %q: %d %s, want a 400 envelope", base, raw, r.status, r.body)
				}
				t.Logf("%s %q: %d in %s", base, raw, r.status, time.Since(start).Round(time.Millisecond))
			}
		}
	})
}
