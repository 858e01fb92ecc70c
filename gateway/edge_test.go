package gateway

import (
	"bufio"
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

// rawDo writes raw to the gateway byte for byte (no client library merges
// or normalises headers) and reads one answer.
func rawDo(t testing.TB, gw *testGateway, raw string) answer {
	t.Helper()
	resp, c := rawSend(t, gw, raw)
	defer c.Close()
	body, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, header: resp.Header, body: body}
	a.env, a.isEnv = apierr.Parse(body)
	if resp.StatusCode < 300 {
		_ = json.Unmarshal(body, &a.echo)
	}
	return a
}

// rawSend writes raw on a connection of its own and reads the answer's
// head; the caller reads the body as far as it wants and closes c.
func rawSend(t testing.TB, gw *testGateway, raw string) (*http.Response, net.Conn) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(gw.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		c.Close()
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		c.Close()
		t.Fatalf("read answer: %v", err)
	}
	return resp, c
}

// A client that sends a second copy of a header the gateway sets (in any
// spelling) must not reach the backend with it: the backend sees exactly
// one copy of each, the gateway's.
func TestDoubledGatewayHeadersReplaced(t *testing.T) {
	_, gw, key, res := startWithKey(t)
	forged := []string{
		"X-Vendor-Id: vendor-evil", "x-vendor-id: vendor-evil-2", "X-VENDOR-ID: vendor-evil-3",
		"X-Internal-Token: forged-token", "x-internal-token: forged-token-2",
		"X-Key-Id: key-evil", "x-key-id: key-evil-2",
		"X-Vendor-Environment: live", "x-vendor-environment: live",
		"X-Forwarded-For: 6.6.6.6", "x-forwarded-for: 7.7.7.7",
		"X-Request-Id: rid-one", "x-request-id: rid-two",
		"x-api-key: " + key, "X-Api-Key: vgsandbx_second",
	}
	raw := "GET /api/vendor/v1/me HTTP/1.1\r\nHost: gw\r\nX-API-Key: " + key + "\r\n" + strings.Join(forged, "\r\n") + "\r\n\r\n"
	a := rawDo(t, gw, raw)
	if a.status != 200 {
		t.Fatalf("%d %s", a.status, a.body)
	}
	for k, v := range a.echo {
		if strings.HasPrefix(k, "copies:") {
			t.Errorf("the backend saw %s copies of %s", v, strings.TrimPrefix(k, "copies:"))
		}
	}
	want := map[string]string{
		wire.HeaderVendorID:      res.VendorID,
		wire.HeaderInternalToken: testToken,
		wire.HeaderKeyID:         res.KeyID,
		wire.HeaderEnvironment:   res.Environment,
		wire.HeaderForwardedFor:  "127.0.0.1",
		wire.HeaderRequestID:     a.header.Get("X-Request-Id"),
	}
	for name, v := range want {
		if got := a.echo[name]; got != v {
			t.Errorf("backend saw %s %q, want the gateway's %q", name, got, v)
		}
	}
	if v, ok := a.echo[http.CanonicalHeaderKey(wire.HeaderAPIKey)]; ok {
		t.Errorf("the API key reached the backend: %q", v)
	}
}
