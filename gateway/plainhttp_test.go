package gateway

import (
	"encoding/json"
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

// plainLogLines returns the JSON log lines of msg in logs.
func plainLogLines(logs, msg string) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(logs, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// TestPlainHTTPKeyWarningsBounded: anyone can send keys to the plain
// listener at wire speed, so a key whose MAC does not verify (made up, or
// another deployment's) writes no WARN line and is only counted, and the
// WARN lines of keys that verify are bounded as refusals are
// (access_log.refusals_per_second), the rest summarised. A key sent to a
// path outside /api/ is flagged and counted as one sent under it.
func TestPlainHTTPKeyWarningsBounded(t *testing.T) {
	// The WARN line of a key sent in clear text, and the summary of those
	// not written in full, as an operator searches for them.
	const (
		plainKeyWarning = "api key sent over plain http: treat it as exposed and have the vendor rotate it"
		plainKeySummary = "api keys sent over plain http, not logged one by one"
	)
	const perSecond = 5
	b := newTestBackend(t)
	gw := startTLSGateway(t, b, func(o *Options) {
		o.Config.HTTPListen = "127.0.0.1:0"
		o.Config.AccessLog.RefusalsPerSecond = perSecond
		o.Config.AccessLog.SummaryInterval = time.Second
	})
	plain := startPlain(t, gw.testGateway)
	key, res := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))

	const madeUp = 300
	for i := 0; i < madeUp; i++ {
		do(t, "GET", plain+"/api/vendor/v1/me", randomKey(t)).wantError(t, 400, apierr.RequestFailed)
	}
	if n := len(plainLogLines(gw.logs.String(), plainKeyWarning)); n != 0 {
		t.Fatalf("%d made-up keys wrote %d WARN lines, want 0", madeUp, n)
	}
	if n := metricValue(t, gw.testGateway, "vendorgate_gateway_cleartext_keys_total"); n != madeUp {
		t.Fatalf("cleartext_keys_total %v, want %d", n, madeUp)
	}
	if n := metricValue(t, gw.testGateway, "vendorgate_gateway_cleartext_keys_unverified_total"); n != madeUp {
		t.Fatalf("cleartext_keys_unverified_total %v, want %d", n, madeUp)
	}

	// A real key, sent again and again: a few lines a second in full, the
	// rest in summaries, every one accounted for.
	const real = 200
	first := time.Now().Unix()
	for i := 0; i < real; i++ {
		do(t, "GET", plain+"/api/vendor/v1/me", key).wantError(t, 400, apierr.RequestFailed)
	}
	seconds := time.Now().Unix() - first + 1
	full := plainLogLines(gw.logs.String(), plainKeyWarning)
	if len(full) == 0 || int64(len(full)) > perSecond*seconds {
		t.Fatalf("%d requests with a real key over %d s wrote %d WARN lines, want 1 to %d", real, seconds, len(full), perSecond*seconds)
	}
	if full[0]["level"] != "WARN" || full[0]["key_id"] != res.KeyID || full[0]["key_status"] != "valid" {
		t.Fatalf("the WARN line: %v", full[0])
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		summarised := 0.0
		for _, l := range plainLogLines(gw.logs.String(), plainKeySummary) {
			summarised += l["count"].(float64)
		}
		if len(full)+int(summarised) == real {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d WARN lines and %v summarised, want %d in all", len(full), summarised, real)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := metricValue(t, gw.testGateway, "vendorgate_gateway_cleartext_keys_unverified_total"); n != madeUp {
		t.Fatalf("cleartext_keys_unverified_total %v after real keys, want %d", n, madeUp)
	}

	// Outside /api/: flagged, counted and logged as under it.
	logged := len(plainLogLines(gw.logs.String(), plainKeyWarning))
	time.Sleep(time.Until(time.Unix(time.Now().Unix()+1, 0))) // a fresh second of the rate
	for _, path := range []string{"/", "/docs", "/nowhere"} {
		a := do(t, "GET", plain+path, key)
		a.wantError(t, 400, apierr.RequestFailed)
		if !strings.Contains(a.env.Message, "exposed") {
			t.Fatalf("GET %s with a key: %q", path, a.env.Message)
		}
	}
	do(t, "GET", plain+"/nowhere", randomKey(t)).wantError(t, 400, apierr.RequestFailed)
	if n := metricValue(t, gw.testGateway, "vendorgate_gateway_cleartext_keys_total"); n != madeUp+real+4 {
		t.Fatalf("cleartext_keys_total %v, want %d", n, madeUp+real+4)
	}
	if n := metricValue(t, gw.testGateway, "vendorgate_gateway_cleartext_keys_unverified_total"); n != madeUp+1 {
		t.Fatalf("cleartext_keys_unverified_total %v, want %d", n, madeUp+1)
	}
	if n := len(plainLogLines(gw.logs.String(), plainKeyWarning)) - logged; n != 3 {
		t.Fatalf("3 real keys sent outside /api/ wrote %d WARN lines, want 3", n)
	}
	if n := metricValue(t, gw.testGateway, `vendorgate_gateway_plain_http_requests_total{answer="key_refused"}`); n != 4 {
		t.Fatalf(`plain_http_requests_total{answer="key_refused"} %v, want 4`, n)
	}
}
