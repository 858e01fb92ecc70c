package gateway

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestAdminListenerTakesNoBody: the admin listener's endpoints take no
// body, so one announced (here just under fasthttp's 4 MiB default) is
// refused at once, with no memory set aside for it.
func TestAdminListenerTakesNoBody(t *testing.T) {
	gw := startGateway(t, newTestBackend(t), nil)
	addr := strings.TrimPrefix(gw.admin, "http://")
	const conns, announced = 8, 4_000_000
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	cs := make([]net.Conn, conns)
	for i := range cs {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cs[i] = c
		if _, err := fmt.Fprintf(c, "POST /metrics HTTP/1.1\r\nHost: gw\r\nContent-Length: %d\r\n\r\nx", announced); err != nil {
			t.Fatal(err)
		}
	}
	// The admin read timeout is 10s: an answer within 5s did not wait for
	// the body.
	deadline := time.Now().Add(5 * time.Second)
	var failures []string
	for i, c := range cs {
		_ = c.SetReadDeadline(deadline)
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			failures = append(failures, fmt.Sprintf("connection %d: no answer while the announced body was not sent: %v", i, err))
			continue
		}
		res.Body.Close()
		if res.StatusCode != http.StatusBadRequest && res.StatusCode != http.StatusRequestEntityTooLarge {
			failures = append(failures, fmt.Sprintf("connection %d: status %d, want a refusal (400 or 413)", i, res.StatusCode))
		}
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("heap grew %d KiB while %d connections announced %d bytes each", grew>>10, conns, announced)
	if grew > conns*announced/4 {
		failures = append(failures, fmt.Sprintf("heap grew %d MiB: the admin listener set memory aside for bodies", grew>>20))
	}
	if len(failures) > 0 {
		t.Fatal(strings.Join(failures, "\n"))
	}
}
