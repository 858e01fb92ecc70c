package backend

import (
	"log/slog"
	"strings"
	"testing"

	"vendorgate/shared/testlog"
	"vendorgate/shared/wire"
)

// Request bytes never reach the log: a malformed request carrying the
// internal token is logged by its kind and peer only.
func TestMalformedRequestNotLogged(t *testing.T) {
	var logs testlog.Buffer
	h := start(t, func(o *Options) {
		o.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	for _, addr := range []string{h.api, h.admin} {
		testlog.SendRaw(t, addr,
			"GET /api/vendor/v1/me HTTP/1.1\r\nHost: b\r\nX-Internal-Token: "+testInternalToken+"\r\nBad Header Line\r\n\r\n",
			"GET /api/vendor/v1/me HTTP/1.1\r\nHost: b\r\nX-Internal-Token: "+testInternalToken+"\r\nContent-Length: nope\r\n\r\n",
			"GET /api/vendor/v1/me "+testInternalToken+"\r\nHost: b\r\n\r\n",
			"POST /admin/v1/vendors HTTP/1.1\r\nHost: b\r\nAuthorization: Bearer "+testAdminToken+"\r\nTransfer-Encoding: bogus\r\n\r\n",
		)
	}
	out := logs.WaitFor(func(log string) bool { return strings.Contains(log, "malformed request") })
	for _, secret := range []string{testInternalToken, testAdminToken, "Bad Header Line"} {
		if strings.Contains(out, secret) {
			t.Errorf("the log holds %q:\n%s", secret, out)
		}
	}
	if !strings.Contains(out, "malformed request") || !strings.Contains(out, `"peer":"127.0.0.1:`) {
		t.Errorf("no line naming the malformed request and its peer:\n%s", out)
	}
}

// Every line the backend writes about a vendor's request names the request
// id the gateway sent, so that one request can be followed through both.
func TestRequestLinesCarryTheGatewaysRequestID(t *testing.T) {
	var logs testlog.Buffer
	h := start(t, func(o *Options) {
		o.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	v := h.newVendor("sandbox", "mvr")
	const rid = "gw-rid-0001"
	r := h.vendorCall(v, "POST", "/api/vendor/v1/orders", map[string]string{"Content-Type": "application/json",
		wire.HeaderIdempotency: "idem-rid", wire.HeaderRequestID: rid}, orderBody("D1234567", "mvr"))
	if r.status != 202 {
		t.Fatalf("place: %d %s", r.status, r.body)
	}
	out := logs.WaitFor(func(log string) bool { return strings.Contains(log, `"msg":"order placed"`) })
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, `"msg":"order placed"`) || strings.Contains(line, `"msg":"request"`) {
			if !strings.Contains(line, `"request_id":"`+rid+`"`) {
				t.Errorf("a line about the request lacks its request id: %s", line)
			}
		}
	}
	if !strings.Contains(out, `"msg":"order placed"`) {
		t.Fatalf("no order placed line:\n%s", out)
	}
}

// A request that reaches the backend without the gateway (refused 401)
// is logged without a request id that holds an API key, with its vendor id
// bounded and the characters a terminal acts on (C1 controls, bidi
// overrides) escaped.
func TestDirectCallerHeadersLoggedSafely(t *testing.T) {
	var logs testlog.Buffer
	h := start(t, func(o *Options) {
		o.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	const key = "vglive01_Q2xhdWRlIHdhcyBoZXJlIGFuZCBsZWZ0IGEga2V5"
	testlog.SendRaw(t, h.api,
		"GET /api/vendor/v1/me HTTP/1.1\r\nHost: b\r\nX-Request-Id: id:"+key+"\r\nX-Vendor-Id: v\u009b\u202e-"+
			strings.Repeat("z", 3000)+"\r\nConnection: close\r\n\r\n")
	out := logs.WaitFor(func(log string) bool { return strings.Contains(log, `"msg":"request"`) })
	if !strings.Contains(out, `"msg":"request"`) {
		t.Fatalf("no request line:\n%s", out)
	}
	for _, s := range []string{key[9:], "\u009b", "\u202e", strings.Repeat("z", 300)} {
		if strings.Contains(out, s) {
			t.Errorf("the log holds %.40q:\n%.600s", s, out)
		}
	}
	if !strings.Contains(out, `"request_id":""`) || !strings.Contains(out, `"vendor_id":"v\\u009b\\u202e-zzz`) ||
		!strings.Contains(out, `...[truncated: 3007 bytes]"`) {
		t.Errorf("the request line does not show the headers redacted, escaped and bounded:\n%.600s", out)
	}
}
