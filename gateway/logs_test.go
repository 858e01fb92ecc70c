package gateway

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"vendorgate/shared/testlog"
	"vendorgate/shared/wire"
)

// A malformed request carrying a key is logged by its kind and its peer,
// never with its bytes.
func TestMalformedRequestNotLogged(t *testing.T) {
	var logs testlog.Buffer
	b := newTestBackend(t)
	gw := startGateway(t, b, func(o *Options) {
		o.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	secret := key[len("vgsandbx_"):]
	for _, url := range []string{gw.url, gw.admin} {
		testlog.SendRaw(t, url,
			"GET /api/vendor/v1/me HTTP/1.1\r\nHost: g\r\nX-API-Key: "+key+"\r\nBad Header Line\r\n\r\n",
			"GET /api/vendor/v1/me HTTP/1.1\r\nHost: g\r\nX-API-Key: "+key+"\r\nContent-Length: nope\r\n\r\n",
			"GET /api/vendor/v1/me "+key+"\r\nHost: g\r\n\r\n",
			"POST /api/vendor/v1/orders HTTP/1.1\r\nHost: g\r\nX-API-Key: "+key+"\r\nTransfer-Encoding: bogus\r\n\r\n",
		)
	}
	out := logs.WaitFor(func(log string) bool { return strings.Count(log, `"msg":"malformed request"`) >= 8 })
	for _, s := range []string{secret, "Bad Header Line"} {
		if strings.Contains(out, s) {
			t.Errorf("the log holds %q:\n%s", s, out)
		}
	}
	if n := strings.Count(out, `"msg":"malformed request"`); n < 8 || !strings.Contains(out, `"peer":"127.0.0.1:`) ||
		!strings.Contains(out, `"kind":"malformed header line"`) {
		t.Errorf("want 8 lines naming the malformed request, its kind and peer, got %d:\n%s", n, out)
	}
}
