package proxy

import (
	"testing"

	"github.com/valyala/fasthttp"
)

// removeHopHeaders is applied to the request and the response alike: the
// names listed in Connection and the fixed hop-by-hop list go both ways; a
// response keeps the framing fasthttp manages for the client side.
func TestRemoveHopHeadersBothWays(t *testing.T) {
	var req fasthttp.RequestHeader
	req.Set("Connection", "keep-alive, X-Drop")
	req.Set("X-Drop", "1")
	req.Set("Keep-Alive", "timeout=5")
	req.Set("Upgrade", "h2c")
	req.Set("Proxy-Authorization", "Basic x")
	req.Set("X-Keep", "1")
	req.Set("X-Vendor-Id", "forged")
	also := removeHopHeaders(&req, false, gatewayHeaders)
	for _, name := range []string{"X-Drop", "Keep-Alive", "Upgrade", "Proxy-Authorization"} {
		if v := req.Peek(name); v != nil {
			t.Errorf("request kept hop-by-hop %s: %q", name, v)
		}
	}
	if string(req.Peek("X-Keep")) != "1" {
		t.Errorf("request lost X-Keep")
	}
	if want := uint16(1) << indexFold(gatewayHeaders, []byte("x-vendor-id")); also != want {
		t.Errorf("gateway headers present = %b, want %b", also, want)
	}

	var resp fasthttp.ResponseHeader
	resp.Set("Connection", "X-Drop")
	resp.Set("X-Drop", "1")
	resp.Set("Keep-Alive", "timeout=5")
	resp.Set("Proxy-Authenticate", "Basic")
	resp.Set("X-Keep", "1")
	if also := removeHopHeaders(&resp, true, internalResponseHeaders); also != 0 {
		t.Errorf("internal headers present = %b, want none", also)
	}
	for _, name := range []string{"X-Drop", "Keep-Alive", "Proxy-Authenticate"} {
		if v := resp.Peek(name); v != nil {
			t.Errorf("response kept hop-by-hop %s: %q", name, v)
		}
	}
	if string(resp.Peek("X-Keep")) != "1" {
		t.Errorf("response lost X-Keep")
	}
}

// Stripping a request and a response with no hop-by-hop header allocates
// nothing: the shared walk must stay as cheap as the two loops it replaced.
func TestRemoveHopHeadersAllocs(t *testing.T) {
	var req fasthttp.RequestHeader
	req.Set("Content-Type", "application/json")
	req.Set("X-Api-Key", "vg_test")
	var resp fasthttp.ResponseHeader
	resp.Set("Content-Type", "application/json")
	allocs := testing.AllocsPerRun(100, func() {
		removeHopHeaders(&req, false, gatewayHeaders)
		removeHopHeaders(&resp, true, internalResponseHeaders)
	})
	if allocs != 0 {
		t.Errorf("removeHopHeaders allocates %.1f times per request and response, want 0", allocs)
	}
}
