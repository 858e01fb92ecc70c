package backend

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// rawRequest writes raw to addr as it is, byte for byte (no client library
// normalises the path or merges headers), and reads one answer.
func rawRequest(t testing.TB, addr, raw string) resp {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("read answer to %q: %v", raw, err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return resp{status: res.StatusCode, header: res.Header, body: body}
}

// A request that names its vendor, key or environment twice is refused:
// only the gateway sets them, once each.
func TestDuplicateIdentityHeadersRefused(t *testing.T) {
	h := start(t)
	v := h.newVendor("sandbox", "mvr")
	other := h.newVendor("sandbox", "mvr")
	addr := strings.TrimPrefix(h.api, "http://")
	base := "GET /api/vendor/v1/me HTTP/1.1\r\nHost: b\r\nX-Internal-Token: " + testInternalToken + "\r\n"
	if r := rawRequest(t, addr, base+"X-Vendor-Id: "+v+"\r\n\r\n"); r.status != 200 {
		t.Fatalf("one X-Vendor-Id: %d %s", r.status, r.body)
	}
	for _, c := range []struct{ name, headers string }{
		{"X-Vendor-Id", "X-Vendor-Id: " + v + "\r\nX-Vendor-Id: " + other + "\r\n"},
		{"X-Vendor-Id", "X-Vendor-Id: " + v + "\r\nx-vendor-id: " + other + "\r\n"},
		{"X-Vendor-Id", "X-Vendor-Id: " + v + "\r\nX-VENDOR-ID: " + v + "\r\n"},
		{"X-Key-Id", "X-Vendor-Id: " + v + "\r\nX-Key-Id: k1\r\nX-Key-Id: k2\r\n"},
		{"X-Vendor-Environment", "X-Vendor-Id: " + v + "\r\nX-Vendor-Environment: sandbox\r\nX-Vendor-Environment: live\r\n"},
	} {
		r := rawRequest(t, addr, base+c.headers+"\r\n")
		code, fields, _ := r.envelope(t)
		if r.status != 400 || code != "validation_error" || fields[c.name] == "" {
			t.Errorf("%q: %d %s, want 400 validation_error naming %s", c.headers, r.status, r.body, c.name)
		}
	}
	// The same on an order placement and on the internal lookup.
	post := "POST /api/vendor/v1/orders HTTP/1.1\r\nHost: b\r\nX-Internal-Token: " + testInternalToken +
		"\r\nX-Vendor-Id: " + other + "\r\nX-Vendor-Id: " + v + "\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
	if r := rawRequest(t, addr, post); r.status != 400 || r.code() != "validation_error" {
		t.Errorf("doubled X-Vendor-Id on POST: %d %s", r.status, r.body)
	}
}
