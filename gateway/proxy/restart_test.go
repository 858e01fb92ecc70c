package proxy

import (
	"errors"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// startBackend serves 200 on a real socket at addr ("127.0.0.1:0" for a
// free port); closing the returned server closes its listener and every
// connection at once, idle ones included, as a killed process's do.
func startBackend(t *testing.T, addr string) (*http.Server, string) {
	t.Helper()
	var ln net.Listener
	var err error
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if ln, err = net.Listen("tcp", addr); err == nil || time.Now().After(end) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(50 * time.Millisecond) // concurrent calls overlap: one connection each
		_, _ = w.Write([]byte(`{}`))
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return srv, ln.Addr().String()
}

func forward(p *Proxy) (int, error) {
	var ctx fasthttp.RequestCtx
	ctx.Request.SetRequestURI("/api/vendor/v1/me")
	ctx.Request.Header.SetHost("gateway")
	_, err := p.Forward(&ctx, &Identity{VendorID: "v", KeyID: "k", Environment: "sandbox"}, false, nil)
	return ctx.Response.StatusCode(), err
}

// TestProbeAfterBackendDiedUsesFreshConnection: connections pooled to a
// backend that died stay in the pool; once the breaker has opened, its
// half-open probe must not go out on one of them, or a backend that is back
// stays refused for another open period per dead connection.
func TestProbeAfterBackendDiedUsesFreshConnection(t *testing.T) {
	srv, addr := startBackend(t, "127.0.0.1:0")
	const openFor = 300 * time.Millisecond
	o := testOptions("http://" + addr)
	o.Timeout, o.BreakerOpenFor, o.BreakerFailures = 2*time.Second, openFor, 2
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const pooled = 12
	var wg sync.WaitGroup
	for range pooled {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if status, err := forward(p); err != nil || status != 200 {
				t.Errorf("forward = %d, %v", status, err)
			}
		}()
	}
	wg.Wait()
	if n := p.backends[0].hc.ConnsCount(); n < 4 {
		t.Fatalf("%d pooled connections after %d concurrent calls, want at least 4 (2 to open the breaker, more left)", n, pooled)
	}

	_ = srv.Close()
	time.Sleep(50 * time.Millisecond) // the FINs arrive
	for i := range 2 {
		if _, err := forward(p); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("call %d with the backend dead: %v, want ErrUnavailable", i+1, err)
		}
	}
	if state := p.backends[0].cb.State().String(); state != "open" {
		t.Fatalf("breaker %s after two failures, want open", state)
	}

	startBackend(t, addr)
	time.Sleep(openFor + 50*time.Millisecond)
	if status, err := forward(p); err != nil || status != 200 {
		t.Fatalf("the first call after the open period, backend back: %d, %v (breaker %s); want 200", status, err, p.backends[0].cb.State())
	}
}
