package gateway

import (
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"vendorgate/config"
	"vendorgate/shared/logtext"
	"vendorgate/shared/testlog"
	"vendorgate/shared/wire"
)

// accessLines are the access log's lines in out, decoded.
func accessLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for _, l := range strings.Split(out, "\n") {
		if !strings.Contains(l, `"msg":"request"`) {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		lines = append(lines, m)
	}
	return lines
}

// A key sent where no key belongs (the User-Agent, alone or inside it; an
// X-Request-Id with a key inside it) is neither logged nor echoed nor sent
// to the backend as a request id: the User-Agent is logged with the key
// replaced, the request id is one the gateway makes.
func TestKeyInHeadersNeverLoggedNorEchoed(t *testing.T) {
	var logs testlog.Buffer
	b := newTestBackend(t)
	gw := startGateway(t, b, func(o *Options) {
		o.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		o.Config.Limits.Vendor.Reads = config.Limit{Rate: 1000, Period: time.Minute}
	})
	key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	secret := key[len("vgsandbx_"):]
	cases := []struct{ name, header, value string }{
		{"User-Agent is the key", "User-Agent", key},
		{"key inside the User-Agent", "User-Agent", "acme-client/2.1 (key=" + key + "; linux)"},
		{"key then .1", "X-Request-Id", key + ".1"},
		{"id: then key", "X-Request-Id", "id:" + key},
		{"key then :retry", "X-Request-Id", key + ":retry"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := do(t, "GET", gw.url+"/api/vendor/v1/me", key, c.header, c.value)
			if a.status != 200 {
				t.Fatalf("%d %s", a.status, a.body)
			}
			got, sent := a.header.Get("X-Request-Id"), a.echo[wire.HeaderRequestID]
			if got == "" || sent != got || strings.Contains(got, secret[:16]) {
				t.Fatalf("X-Request-Id answered %q, sent to the backend %q: holds the key or differs", got, sent)
			}
		})
	}
	out := logs.WaitFor(func(log string) bool { return strings.Count(log, `"msg":"request"`) >= len(cases) })
	if strings.Contains(out, secret) || strings.Contains(out, secret[:16]) || strings.Contains(out, secret[len(secret)-16:]) {
		t.Fatalf("the log holds the key's secret:\n%s", out)
	}
	uas := map[string]bool{}
	for _, l := range accessLines(t, out) {
		if ua, ok := l["user_agent"].(string); ok {
			uas[ua] = true
		}
	}
	if !uas[logtext.Redacted] || !uas["acme-client/2.1 (key="+logtext.Redacted+"; linux)"] {
		t.Errorf("the User-Agents are not logged with the key replaced: %v", uas)
	}
}

// C1 controls (U+009B is a terminal's CSI) and bidirectional overrides
// and isolates in a User-Agent are written escaped in the JSON line, never
// raw; a 7,000-byte User-Agent is logged cut to logtext.MaxHeader bytes
// with a marker naming its length.
func TestUserAgentEscapedAndBoundedInLog(t *testing.T) {
	var logs testlog.Buffer
	b := newTestBackend(t)
	gw := startGateway(t, b, func(o *Options) {
		o.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	controls := []rune{0x80, 0x85, 0x9b, 0x9f, 0x202a, 0x202b, 0x202c, 0x202d, 0x202e, 0x2066, 0x2067, 0x2068, 0x2069}
	var ua strings.Builder
	ua.WriteString("ua-controls ")
	for _, r := range controls {
		ua.WriteString("x")
		ua.WriteRune(r)
	}
	long := "ua-long " + strings.Repeat("z", 7000-len("ua-long "))
	if a := do(t, "GET", gw.url+"/api/vendor/v1/me", key, "User-Agent", ua.String()); a.status != 200 {
		t.Fatalf("%d %s", a.status, a.body)
	}
	// Whatever the answer (the test backend reads a smaller head than a
	// real one), the gateway logs the request.
	do(t, "GET", gw.url+"/api/vendor/v1/me", key, "User-Agent", long)
	out := logs.WaitFor(func(log string) bool { return strings.Count(log, `"msg":"request"`) >= 2 })
	for _, r := range controls {
		if strings.ContainsRune(out, r) {
			t.Errorf("U+%04X is in the log raw", r)
		}
	}
	var escaped, bounded string
	for _, l := range accessLines(t, out) {
		s, _ := l["user_agent"].(string)
		switch {
		case strings.HasPrefix(s, "ua-controls "):
			escaped = s
		case strings.HasPrefix(s, "ua-long "):
			bounded = s
		}
	}
	want := "ua-controls "
	for _, r := range controls {
		want += `x\u` + strconv.FormatInt(int64(r)|0x10000, 16)[1:]
	}
	if escaped != want {
		t.Errorf("user_agent logged as %q, want %q", escaped, want)
	}
	if want := long[:logtext.MaxHeader] + "...[truncated: 7000 bytes]"; bounded != want {
		t.Errorf("a 7,000-byte User-Agent logged as %d bytes %.300q, want %q", len(bounded), bounded, want)
	}
}
