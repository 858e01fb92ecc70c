package gateway

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"vendorgate/shared/wire"
)

// lockedBuffer is a log sink safe for the servers' goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A malformed request carrying a key is logged by its kind and its peer,
// never with its bytes.
func TestMalformedRequestNotLogged(t *testing.T) {
	var logs lockedBuffer
	b := newTestBackend(t)
	gw := startGateway(t, b, func(o *Options) {
		o.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	secret := key[len("vgsandbx_"):]
	for _, url := range []string{gw.url, gw.admin} {
		for _, raw := range []string{
			"GET /api/vendor/v1/me HTTP/1.1\r\nHost: g\r\nX-API-Key: " + key + "\r\nBad Header Line\r\n\r\n",
			"GET /api/vendor/v1/me HTTP/1.1\r\nHost: g\r\nX-API-Key: " + key + "\r\nContent-Length: nope\r\n\r\n",
			"GET /api/vendor/v1/me " + key + "\r\nHost: g\r\n\r\n",
			"POST /api/vendor/v1/orders HTTP/1.1\r\nHost: g\r\nX-API-Key: " + key + "\r\nTransfer-Encoding: bogus\r\n\r\n",
		} {
			c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			_, _ = io.WriteString(c, raw)
			_, _ = io.ReadAll(c) // answered 400, then closed
			c.Close()
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(logs.String(), `"msg":"malformed request"`) < 8 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	out := logs.String()
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
