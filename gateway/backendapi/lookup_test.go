package backendapi

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"

	"vendorgate/shared/wire"
)

// answeringBackend is a key lookup on a real loopback socket that answers
// status and body, and records what each call carried.
type answeringBackend struct {
	url   string
	calls atomic.Int64
	mu    sync.Mutex
	last  *http.Request
}

func startAnswering(t *testing.T, status int, body string) *answeringBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ab := &answeringBackend{url: "http://" + ln.Addr().String()}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ab.calls.Add(1)
		ab.mu.Lock()
		ab.last = r
		ab.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ab
}

func (ab *answeringBackend) lastRequest() *http.Request {
	ab.mu.Lock()
	defer ab.mu.Unlock()
	return ab.last
}

// TestLookupAnswers: each answer of the backend's lookup becomes the
// documented outcome: a resolution, nil for 404 (no such key, cached
// negatively by the caller), ErrUnavailable for anything else. A case
// fails if Lookup maps its answer otherwise.
func TestLookupAnswers(t *testing.T) {
	cases := []struct {
		name    string
		status  int
		body    string
		want    *wire.KeyResolution
		wantErr bool
	}{
		{"found", 200, `{"key_id":"k1","vendor_id":"v1","environment":"live"}`,
			&wire.KeyResolution{KeyID: "k1", VendorID: "v1", Environment: "live"}, false},
		{"no such key", 404, `{"error":{"code":"not_found","message":"no key"}}`, nil, false},
		{"backend error", 500, `{"error":{"code":"internal_error","message":"x"}}`, nil, true},
		{"token refused", 401, `{"error":{"code":"invalid_api_key","message":"x"}}`, nil, true},
		{"not JSON", 200, `<html>`, nil, true},
		{"no key id", 200, `{"vendor_id":"v1"}`, nil, true},
		{"no vendor id", 200, `{"key_id":"k1"}`, nil, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ab := startAnswering(t, c.status, c.body)
			cl, err := New(testOptions(ab.url))
			if err != nil {
				t.Fatal(err)
			}
			got, err := cl.Lookup(context.Background(), "abc123")
			if c.wantErr != (err != nil) || err != nil && !errors.Is(err, ErrUnavailable) {
				t.Fatalf("Lookup err = %v; want an ErrUnavailable: %v", err, c.wantErr)
			}
			switch {
			case c.want == nil && got != nil:
				t.Fatalf("Lookup = %+v; want nil", got)
			case c.want != nil && (got == nil || got.KeyID != c.want.KeyID || got.VendorID != c.want.VendorID || got.Environment != c.want.Environment):
				t.Fatalf("Lookup = %+v; want %+v", got, c.want)
			}
			r := ab.lastRequest()
			if r.URL.Path != wire.KeyLookupPath+"abc123" || r.Header.Get(wire.HeaderInternalToken) != "tok" || r.Method != http.MethodGet {
				t.Fatalf("the backend saw %s %s with token %q", r.Method, r.URL.Path, r.Header.Get(wire.HeaderInternalToken))
			}
		})
	}
}

// TestBreakerOpensAndSparesTheBackend: after BreakerFailures failed
// lookups in a row the breaker opens, and lookups fail at once without a
// call; a 404 is an answer, not a failure. It fails if failures are not
// counted, if a 404 counts as one, or if an open breaker still calls.
func TestBreakerOpensAndSparesTheBackend(t *testing.T) {
	missing := startAnswering(t, 404, `{}`)
	o := testOptions(missing.url)
	o.BreakerFailures, o.BreakerOpenFor = 3, time.Hour
	cl, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if res, err := cl.Lookup(context.Background(), "h"); res != nil || err != nil {
			t.Fatalf("Lookup = %+v, %v; want nil, nil", res, err)
		}
	}
	if cl.State() != gobreaker.StateClosed {
		t.Fatalf("breaker %s after five 404s; want closed", cl.State())
	}

	sick := startAnswering(t, 503, `{}`)
	var mu sync.Mutex
	var changes []string
	o = testOptions(sick.url)
	o.BreakerFailures, o.BreakerOpenFor = 3, time.Hour
	o.OnStateChange = func(name string, from, to gobreaker.State) {
		mu.Lock()
		changes = append(changes, name+":"+from.String()+">"+to.String())
		mu.Unlock()
	}
	cl, err = New(o)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := cl.Lookup(context.Background(), "h"); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Lookup against a 503: %v; want ErrUnavailable", err)
		}
	}
	if cl.State() != gobreaker.StateOpen {
		t.Fatalf("breaker %s after three failures; want open", cl.State())
	}
	if _, err := cl.Lookup(context.Background(), "h"); !errors.Is(err, ErrUnavailable) || !errors.Is(err, gobreaker.ErrOpenState) {
		t.Fatalf("Lookup with the breaker open: %v; want ErrUnavailable from the open breaker", err)
	}
	if n := sick.calls.Load(); n != 3 {
		t.Fatalf("the backend had %d calls; want 3 (none once the breaker is open)", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(changes) != 1 || changes[0] != BreakerName+":closed>open" {
		t.Fatalf("state changes %q; want one, %s closed to open", changes, BreakerName)
	}
}

// TestNewRefusesBadBackends: a configuration without a usable backend is
// refused at start, not at the first lookup.
func TestNewRefusesBadBackends(t *testing.T) {
	for _, backends := range [][]string{nil, {"://nohost"}, {"127.0.0.1:8080"}} {
		if _, err := New(testOptions(backends...)); err == nil {
			t.Errorf("New with backends %q succeeded", backends)
		}
	}
}
