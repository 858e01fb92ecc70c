package backend

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"vendorgate/shared/wire"
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

// The guard must see the path the router routes (the raw one), so no
// spelling of an internal path reaches a handler without the token.
func TestInternalGuardOnRawPath(t *testing.T) {
	h := start(t)
	v := h.newVendor("sandbox", "mvr")
	addr := strings.TrimPrefix(h.api, "http://")
	for _, path := range []string{
		"/internal/v1/keys/..%2F..%2Fx",
		"/internal/v1/keys/..%2f..%2f..%2fx",
		"/internal/v1/keys/%2e%2e%2f%2e%2e%2fx",
		"/internal/v1/keys/%2E%2E%2F%2E%2E%2F%2E%2E%2Fapi",
		"/internal/v1/keys/" + strings.Repeat("a", 64) + "/..%2F..%2F..%2F..%2Fx",
		"//internal/v1/keys/" + strings.Repeat("a", 64),
		"/./internal/v1/keys/" + strings.Repeat("a", 64),
		"/x/../internal/v1/keys/" + strings.Repeat("a", 64),
		"/x/..%2Finternal/v1/keys/" + strings.Repeat("a", 64),
		"/%69nternal/v1/keys/" + strings.Repeat("a", 64),
		"/INTERNAL/v1/keys/" + strings.Repeat("a", 64),
		"/Internal/V1/Keys/" + strings.Repeat("a", 64),
		"/api/vendor/v1/orders/..%2F..%2F..%2Fx",
		"/api/vendor/v1/orders/%2e%2e%2f%2e%2e%2fme",
		"//api/vendor/v1/me",
		"/API/Vendor/v1/me",
		"http://b/internal/v1/keys/..%2f..%2fx",
		"/internal/v1/keys/..%5c..%5cx",
	} {
		for _, hdr := range []string{"", "X-Internal-Token: wrong-token-wrong-token\r\n"} {
			raw := "GET " + path + " HTTP/1.1\r\nHost: b\r\n" + wire.HeaderVendorID + ": " + v + "\r\n" + hdr + "\r\n"
			r := rawRequest(t, addr, raw)
			code, _, _ := r.envelope(t)
			if r.status != 401 || code != "invalid_api_key" || !strings.Contains(string(r.body), "internal token required") {
				t.Errorf("GET %s (%q): %d %s, want 401 internal token required", path, hdr, r.status, r.body)
			}
		}
	}
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
