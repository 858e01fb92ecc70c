package liblog

import (
	"bytes"
	"encoding/json"
	"log"
	"log/slog"
	"strings"
	"testing"
)

// TestRouteLogPackage: after Route, a line written through the standard
// library's log package (as net/http's server errors are) is one JSON
// object in the binary's log, not plain text.
func TestRouteLogPackage(t *testing.T) {
	prev := slog.Default()
	t.Cleanup(func() { slog.SetDefault(prev) })
	var buf bytes.Buffer
	Route(slog.New(slog.NewJSONHandler(&buf, nil)))
	log.Printf("http: TLS handshake error from %s: EOF", "127.0.0.1:5")
	var obj map[string]any
	if err := json.Unmarshal(bytes.TrimSpace(buf.Bytes()), &obj); err != nil || !strings.Contains(obj["msg"].(string), "TLS handshake error") {
		t.Fatalf("the log package's line: %q (%v)", buf.String(), err)
	}
}
