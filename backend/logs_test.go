package backend

import (
	"log/slog"
	"strings"
	"testing"

	"vendorgate/shared/testlog"
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
