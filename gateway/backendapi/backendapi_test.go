package backendapi

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// lookupServer is a backend's key lookup on a real socket that can die the
// way a killed process does: listener and every connection closed at once.
type lookupServer struct {
	srv *http.Server
	ln  net.Listener
}

func startLookupServer(t *testing.T, addr string) *lookupServer {
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
		time.Sleep(50 * time.Millisecond) // concurrent lookups overlap: one connection each
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"key_id":"k1","vendor_id":"v1","environment":"sandbox"}`))
	})}
	go func() { _ = srv.Serve(ln) }()
	s := &lookupServer{srv: srv, ln: ln}
	t.Cleanup(s.kill)
	return s
}

// kill closes the listener and every connection, idle ones included.
func (s *lookupServer) kill() { _ = s.srv.Close() }

// TestProbeAfterBackendDiedUsesFreshConnection: connections pooled to a
// backend that died stay in the pool; once the breaker has opened, its
// half-open probe must not go out on one of them, or a backend that is back
// stays refused for another open period per dead connection.
func TestProbeAfterBackendDiedUsesFreshConnection(t *testing.T) {
	srv := startLookupServer(t, "127.0.0.1:0")
	addr := srv.ln.Addr().String()
	const openFor = 300 * time.Millisecond
	o := testOptions("http://" + addr)
	o.InternalToken, o.BreakerOpenFor, o.BreakerFailures = "t", openFor, 2
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	const pooled = 12
	var wg sync.WaitGroup
	for range pooled {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Lookup(context.Background(), "h"); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := c.hosts[0].ConnsCount(); n < 4 {
		t.Fatalf("%d pooled connections after %d concurrent lookups, want at least 4 (2 to open the breaker, more left)", n, pooled)
	}

	srv.kill()
	time.Sleep(50 * time.Millisecond) // the FINs arrive
	for i := range 2 {
		if _, err := c.Lookup(context.Background(), "h"); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("lookup %d with the backend dead: %v, want ErrUnavailable", i+1, err)
		}
	}
	if _, err := c.Lookup(context.Background(), "h"); err == nil || c.State().String() != "open" {
		t.Fatalf("breaker %s after two failures (lookup: %v), want open", c.State(), err)
	}

	startLookupServer(t, addr)
	time.Sleep(openFor + 50*time.Millisecond)
	res, err := c.Lookup(context.Background(), "h")
	if err != nil {
		t.Fatalf("the first lookup after the open period, backend back: %v (breaker %s); want it answered", err, c.State())
	}
	if res == nil || res.KeyID != "k1" || c.State().String() != "closed" {
		t.Fatalf("lookup = %+v, breaker %s; want k1 and closed", res, c.State())
	}
}
