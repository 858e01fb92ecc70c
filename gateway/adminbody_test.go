package gateway

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"vendorgate/shared/testlog"
)

// TestAdminListenerTakesNoBody: the admin listener's endpoints take no
// body, so one announced (here just under fasthttp's 4 MiB default) is
// refused at once, with no memory set aside for it.
func TestAdminListenerTakesNoBody(t *testing.T) {
	gw := startGateway(t, newTestBackend(t), nil)
	const conns, announced = 8, 4_000_000
	heads := make([]string, conns)
	for i := range heads {
		heads[i] = fmt.Sprintf("POST /metrics HTTP/1.1\r\nHost: gw\r\nContent-Length: %d\r\n\r\nx", announced)
	}
	// The admin read timeout is 10s: an answer within 5s did not wait for
	// the body.
	failures := testlog.RefusedUnread(t, gw.admin, heads, announced, 5*time.Second, func(res *http.Response) string {
		if res.StatusCode != http.StatusBadRequest && res.StatusCode != http.StatusRequestEntityTooLarge {
			return fmt.Sprintf("status %d, want a refusal (400 or 413)", res.StatusCode)
		}
		return ""
	})
	if len(failures) > 0 {
		t.Fatal(strings.Join(failures, "\n"))
	}
}
