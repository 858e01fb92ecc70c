package backend

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a log sink safe for the server's goroutines.
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

// Request bytes never reach the log: a malformed request carrying the
// internal token is logged by its kind and peer only.
func TestMalformedRequestNotLogged(t *testing.T) {
	var logs lockedBuffer
	h := start(t, func(o *Options) {
		o.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	for _, addr := range []string{strings.TrimPrefix(h.api, "http://"), strings.TrimPrefix(h.admin, "http://")} {
		for _, raw := range []string{
			"GET /api/vendor/v1/me HTTP/1.1\r\nHost: b\r\nX-Internal-Token: " + testInternalToken + "\r\nBad Header Line\r\n\r\n",
			"GET /api/vendor/v1/me HTTP/1.1\r\nHost: b\r\nX-Internal-Token: " + testInternalToken + "\r\nContent-Length: nope\r\n\r\n",
			"GET /api/vendor/v1/me " + testInternalToken + "\r\nHost: b\r\n\r\n",
			"POST /admin/v1/vendors HTTP/1.1\r\nHost: b\r\nAuthorization: Bearer " + testAdminToken + "\r\nTransfer-Encoding: bogus\r\n\r\n",
		} {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			_, _ = io.WriteString(c, raw)
			_, _ = io.ReadAll(c) // the server answers 400 and closes
			c.Close()
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(logs.String(), "malformed request") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	out := logs.String()
	for _, secret := range []string{testInternalToken, testAdminToken, "Bad Header Line"} {
		if strings.Contains(out, secret) {
			t.Errorf("the log holds %q:\n%s", secret, out)
		}
	}
	if !strings.Contains(out, "malformed request") || !strings.Contains(out, `"peer":"127.0.0.1:`) {
		t.Errorf("no line naming the malformed request and its peer:\n%s", out)
	}
}
