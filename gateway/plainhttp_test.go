package gateway

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"vendorgate/shared/apierr"
	"vendorgate/shared/wire"
)

// startPlain serves gw's plain-HTTP listener and returns its base URL.
func startPlain(t *testing.T, gw *testGateway) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gw.g.ServePlain(ln) }()
	return "http://" + ln.Addr().String()
}

// The plain-HTTP listener beside HTTPS redirects / and /docs to
// public_base_url (never to the Host the request named) with 308, refuses
// the API with the envelope and proxies nothing; a request that carried a
// key is told the key is exposed, the log names the key's id and never the
// key, and a metric counts it.
func TestPlainHTTPListener(t *testing.T) {
	b := newTestBackend(t)
	gw := startTLSGateway(t, b, func(o *Options) { o.Config.HTTPListen = "127.0.0.1:0" })
	plain := startPlain(t, gw.testGateway)
	key, res := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))

	for _, path := range []string{"/", "/docs"} {
		req, _ := http.NewRequest("GET", plain+path, nil)
		req.Host = "evil.example"
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 308 || resp.Header.Get("Location") != testPublicBaseURL+path {
			t.Fatalf("GET %s (Host evil.example): %d Location %q, want 308 to %s", path, resp.StatusCode, resp.Header.Get("Location"), testPublicBaseURL+path)
		}
		answer{header: resp.Header}.wantCommon(t)
	}
	calls := b.calls.Load()
	a := do(t, "GET", plain+"/api/vendor/v1/me", "")
	a.wantError(t, 400, apierr.RequestFailed)
	if !strings.Contains(a.env.Message, "HTTPS only") || !strings.Contains(a.env.Message, testPublicBaseURL) || strings.Contains(a.env.Message, "exposed") {
		t.Fatalf("refusal without a key: %q", a.env.Message)
	}
	if n := metricValue(t, gw.testGateway, "vendorgate_gateway_cleartext_keys_total"); n != 0 {
		t.Fatalf("cleartext_keys_total %v before any key was sent", n)
	}
	a = do(t, "GET", plain+"/api/vendor/v1/me", key)
	a.wantError(t, 400, apierr.RequestFailed)
	if !strings.Contains(a.env.Message, "exposed") || !strings.Contains(a.env.Message, "HTTPS only") {
		t.Fatalf("refusal with a key: %q", a.env.Message)
	}
	// A body (an order sent in clear text) is refused unread, the same way.
	req, _ := http.NewRequest("POST", plain+"/api/vendor/v1/orders", strings.NewReader(strings.Repeat("x", 20000)))
	req.Header.Set(wire.HeaderAPIKey, key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if env, ok := apierr.Parse(body); resp.StatusCode != 400 || !ok || env.Code != apierr.RequestFailed || !strings.Contains(env.Message, "exposed") {
		t.Fatalf("POST an order over plain HTTP: %d %s", resp.StatusCode, body)
	}
	if got := b.calls.Load(); got != calls {
		t.Fatalf("the backend was called %d times from the plain listener", got-calls)
	}
	if n := metricValue(t, gw.testGateway, "vendorgate_gateway_cleartext_keys_total"); n != 2 {
		t.Fatalf("cleartext_keys_total %v, want 2", n)
	}
	if n := metricValue(t, gw.testGateway, `vendorgate_gateway_plain_http_requests_total{answer="api_refused"}`); n != 3 {
		t.Fatalf(`plain_http_requests_total{answer="api_refused"} %v, want 3`, n)
	}
	if n := metricValue(t, gw.testGateway, `vendorgate_gateway_plain_http_requests_total{answer="redirect"}`); n != 2 {
		t.Fatalf(`plain_http_requests_total{answer="redirect"} %v, want 2`, n)
	}
	logs := gw.logs.String()
	if strings.Count(logs, "api key sent over plain http") != 2 || !strings.Contains(logs, `"key_id":"`+res.KeyID+`"`) {
		t.Fatalf("no log line naming key id %s:\n%s", res.KeyID, logs)
	}
	if strings.Contains(logs, key) || strings.Contains(logs, key[9:]) {
		t.Fatal("the log holds the API key")
	}
	do(t, "GET", plain+"/.well-known/acme-challenge/token", "").wantError(t, 404, apierr.NotFound)
	do(t, "GET", plain+"/openapi.json", "").wantError(t, 404, apierr.NotFound)
}
