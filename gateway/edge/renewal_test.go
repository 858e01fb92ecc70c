package edge

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"vendorgate/config"
	"vendorgate/shared/testcert"
)

// pollCount counts the certificate watcher's looks (Options.onPoll) for a
// test to wait on.
type pollCount struct {
	n    atomic.Int64
	tick chan struct{}
}

func newPollCount() *pollCount { return &pollCount{tick: make(chan struct{}, 1)} }

func (p *pollCount) onPoll() {
	p.n.Add(1)
	select {
	case p.tick <- struct{}{}:
	default:
	}
}

// wait returns once the watcher has looked n more times.
func (p *pollCount) wait(t *testing.T, n int64) {
	t.Helper()
	target := p.n.Load() + n
	for p.n.Load() < target {
		select {
		case <-p.tick:
		case <-time.After(10 * time.Second):
			t.Fatalf("the watcher looked %d times in 10s, want %d more", p.n.Load(), target-p.n.Load())
		}
	}
}

// A renewal needs no restart: a change of the files (seen by the watcher)
// and a SIGHUP (ReloadCertificates) swap the certificate for new
// handshakes, while clients keep sending requests over new and kept-alive
// connections, some of them in flight across the swap: not one fails. A
// bad new file (a key that does not match) is refused with one line naming
// it, however many times the watcher looks, and the certificate in force
// stays.
func TestCertificateRenewalUnderLoad(t *testing.T) {
	polls := newPollCount()
	e := startEdge(t, edgeOptions{slow: 300 * time.Millisecond, onPoll: polls.onPoll}, func(c *config.Gateway) {
		c.TLS.WatchInterval = 100 * time.Millisecond
	})

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var sent, failed int
	var failures []string
	progress := make(chan struct{}, 1) // a request answered
	load := func(cl *http.Client, path string) {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			req, _ := http.NewRequest("GET", e.url+path, nil)
			req.Header.Set("X-API-Key", validKey)
			resp, err := cl.Do(req)
			ok := err == nil && resp.StatusCode == 200
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			mu.Lock()
			sent++
			if !ok {
				failed++
				if len(failures) < 5 {
					failures = append(failures, fmt.Sprintf("%s: %v %v", path, err, resp))
				}
			}
			mu.Unlock()
			select {
			case progress <- struct{}{}:
			default:
			}
		}
	}
	keepAlive := e.client()
	newConns := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: e.ca.ClientConfig(tlsName), DisableKeepAlives: true}}
	for _, l := range []struct {
		cl   *http.Client
		path string
	}{{keepAlive, "/fast"}, {newConns, "/fast"}, {newConns, "/fast"}, {keepAlive, "/slow"}, {newConns, "/slow"}} {
		wg.Add(1)
		go load(l.cl, l.path)
	}

	first := e.servedSerial(t)
	// 1. The files change on disk: the watcher swaps.
	e.ca.Issue(t, time.Now().Add(60*24*time.Hour), tlsName, "127.0.0.1").Write(t, e.dir, "api")
	second := e.waitSerial(t, first)

	// 2. A bad new file: the key of another certificate.
	other := e.ca.Issue(t, time.Now().Add(time.Hour), tlsName)
	testcert.WriteFile(t, e.keyFile, other.KeyPEM)
	polls.wait(t, 6) // the watcher looks six times (refused at its second look)
	if s := e.servedSerial(t); s != second {
		t.Fatalf("after a bad key file the certificate served changed from %s to %s", second, s)
	}
	if err := e.s.ReloadCertificates(); err == nil || !errors.Is(err, ErrUnchanged) {
		t.Fatalf("SIGHUP with the same bad files: %v, want them not read again", err)
	}
	refusals := strings.Count(e.logs.String(), "tls certificate refused")
	if refusals != 1 || !strings.Contains(e.logs.String(), e.certFile) || !strings.Contains(e.logs.String(), "private key does not match") {
		t.Fatalf("%d refusal lines, want 1 naming %s and why:\n%s", refusals, e.certFile, e.logs.String())
	}
	if n := e.metric(t, `vendorgate_gateway_tls_certificate_reloads_total{result="error"}`); n != 1 {
		t.Fatalf(`certificate_reloads_total{result="error"} %v, want 1`, n)
	}

	// 3. A good pair written while the watcher is off duty, then SIGHUP.
	third := e.ca.Issue(t, time.Now().Add(80*24*time.Hour), tlsName, "127.0.0.1")
	third.Write(t, e.dir, "api")
	if err := e.s.ReloadCertificates(); err != nil && !errors.Is(err, ErrUnchanged) { // the watcher may have been first
		t.Fatal(err)
	}
	if s := e.servedSerial(t); s == second || s == first {
		t.Fatalf("after SIGHUP the certificate served is still %s", s)
	}
	want := fmt.Sprint(third.NotAfter.Unix())
	if v := e.metric(t, `vendorgate_gateway_tls_certificate_expiry_timestamp_seconds{cert_file="`+e.certFile+`",names="`+tlsName+`,127.0.0.1"}`); fmt.Sprint(int64(v)) != want {
		t.Fatalf("expiry gauge %v, want %s", v, want)
	}
	// More requests after the last swap: each of the five loops finishes
	// two more, at least one of them begun after it.
	mu.Lock()
	after := sent + 10
	mu.Unlock()
	for n := after - 10; n < after; {
		select {
		case <-progress:
		case <-time.After(20 * time.Second):
			t.Fatalf("%d requests in 20s after the last swap, want 10", n-after+10)
		}
		mu.Lock()
		n = sent
		mu.Unlock()
	}
	close(stop)
	wg.Wait()
	t.Logf("%d requests, %d failed, through 2 swaps and a refused file", sent, failed)
	if failed != 0 || sent < 20 {
		t.Fatalf("%d of %d requests failed: %v", failed, sent, failures)
	}
	if n := e.metric(t, `vendorgate_gateway_tls_certificate_reloads_total{result="ok"}`); n != 2 {
		t.Fatalf(`certificate_reloads_total{result="ok"} %v, want 2`, n)
	}
}
