package proxy

import (
	"bufio"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"vendorgate/shared/wire"
)

// Every copy of a header the gateway sets is replaced, in any spelling,
// whether or not the server normalises header names.
func TestPrepareRequestReplacesEveryCopy(t *testing.T) {
	raw := "GET /api/vendor/v1/me HTTP/1.1\r\nHost: g\r\nX-API-Key: vgsandbx_k\r\n" +
		"X-Vendor-Id: evil-1\r\nx-vendor-id: evil-2\r\nX-VENDOR-ID: evil-3\r\nX-Key-Id: k-evil\r\nx-key-id: k-evil\r\n" +
		"X-Internal-Token: t1\r\nx-internal-token: t2\r\nX-Vendor-Environment: live\r\nx-vendor-environment: live\r\n" +
		"X-Request-Id: r1\r\nx-request-id: r2\r\nX-Forwarded-For: 6.6.6.6\r\nx-forwarded-for: 7.7.7.7\r\nx-api-key: second\r\n\r\n"
	for _, disable := range []bool{false, true} {
		var req fasthttp.Request
		if disable {
			req.Header.DisableNormalizing()
		}
		if err := req.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
			t.Fatal(err)
		}
		prepareRequest(&req.Header, &Identity{VendorID: "v", KeyID: "k", Environment: "sandbox",
			RequestID: []byte("rid"), ClientIP: []byte("127.0.0.1")}, []byte("token"))
		want := map[string]string{wire.HeaderVendorID: "v", wire.HeaderKeyID: "k", wire.HeaderEnvironment: "sandbox",
			wire.HeaderRequestID: "rid", wire.HeaderForwardedFor: "127.0.0.1", wire.HeaderInternalToken: "token"}
		seen := map[string][]string{}
		for k, v := range req.Header.All() {
			name := strings.ToLower(string(k))
			seen[name] = append(seen[name], string(v))
		}
		for name, v := range want {
			if got := seen[strings.ToLower(name)]; len(got) != 1 || got[0] != v {
				t.Errorf("normalising off=%v: %s = %q, want only %q", disable, name, got, v)
			}
		}
		if got := seen["x-api-key"]; len(got) != 0 {
			t.Errorf("normalising off=%v: the API key is still there: %q", disable, got)
		}
	}
}
