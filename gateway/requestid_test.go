package gateway

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"vendorgate/config"
	"vendorgate/shared/testlog"
	"vendorgate/shared/wire"
)

// An X-Request-Id shaped like an API key (any 8-character prefix, "_", a
// secret of the key alphabet) is most likely a key pasted in the wrong
// header: it is neither echoed, sent to the backend nor logged; the
// gateway makes an id instead. An id that merely looks alike is kept.
func TestRequestIDShapedLikeKeyReplaced(t *testing.T) {
	var logs testlog.Buffer
	b := newTestBackend(t)
	gw := startGateway(t, b, func(o *Options) {
		o.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		o.Config.Limits.Vendor.Reads = config.Limit{Rate: 1000, Period: time.Minute}
	})
	key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	other := signedKey(t)
	for _, c := range []struct {
		name, id string
		kept     bool
	}{
		{"the caller's own key", key, false},
		{"a key of this server", other, false},
		{"a key of another prefix", "live0001_" + other[9:], false},
		{"a short secret", "abcdefgh_" + strings.Repeat("Q", 32), false},
		{"a long secret", "abcdefgh_" + strings.Repeat("x-_9", 13), false},
		{"not a prefix (capital)", "Abcdefgh_" + strings.Repeat("Z", 43), true},
		{"secret too short", "abcdefgh_" + strings.Repeat("Q", 31), true},
		{"dots in the secret", "abcdefgh_" + strings.Repeat("a.", 20), true},
		{"a uuid", "3f2504e0-4f89-11d3-9a0c-0305e82c3301", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := do(t, "GET", gw.url+"/api/vendor/v1/me", key, "X-Request-Id", c.id)
			if a.status != 200 {
				t.Fatalf("%d %s", a.status, a.body)
			}
			got, sent := a.header.Get("X-Request-Id"), a.echo[wire.HeaderRequestID]
			if kept := got == c.id; kept != c.kept || sent != got || got == "" {
				t.Fatalf("X-Request-Id %q answered %q, sent to the backend %q; want kept %v", c.id, got, sent, c.kept)
			}
		})
	}
	out := logs.WaitFor(func(log string) bool { return strings.Count(log, `"msg":"request"`) >= 9 })
	for _, s := range []string{key[9:], other[9:]} {
		if strings.Contains(out, s) {
			t.Errorf("the log holds a key's secret:\n%s", out)
		}
	}
}
