package gateway

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// TestShutdownDelayDrainsBeforeClosing: during the delay /readyz says 503,
// the public port still answers and asks clients to close their connection;
// after it, the listener is closed.
func TestShutdownDelayDrainsBeforeClosing(t *testing.T) {
	_, gw, key, _ := startWithKey(t)

	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = gw.g.Shutdown(600*time.Millisecond, 5*time.Second) }()
	time.Sleep(150 * time.Millisecond)

	if a := do(t, "GET", gw.admin+"/readyz", ""); a.status != 503 {
		t.Fatalf("/readyz while draining = %d %s", a.status, a.body)
	}
	c, err := net.Dial("tcp", gw.url[len("http://"):])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	fmt.Fprintf(c, "GET /api/vendor/v1/me HTTP/1.1\r\nHost: x\r\nX-API-Key: %s\r\n\r\n", key)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("a request during the delay = %d", resp.StatusCode)
	}
	if !resp.Close {
		t.Fatalf("a draining replica must ask clients to close their connection: %v", resp.Header)
	}
	wg.Wait()
	if c, err := net.DialTimeout("tcp", gw.url[len("http://"):], 200*time.Millisecond); err == nil {
		c.Close()
		t.Fatal("the public listener still accepts after Shutdown returned")
	}
}
