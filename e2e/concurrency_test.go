package e2e

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"vendorgate/shared/testslow"
)

// holdReport starts a download of rawURL on a connection of its own with a
// small receive buffer and reads only the answer's head: the gateway that
// answered stays stuck writing the body, holding the download's slots,
// until the connection closes.
func holdReport(t *testing.T, rawURL, key string) (status int, c net.Conn) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	c, err = (&net.Dialer{Control: testslow.SmallReceiveBuffer}).Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nX-API-Key: %s\r\n\r\n", u.RequestURI(), u.Host, key)
	resp, err := http.ReadResponse(bufio.NewReaderSize(c, 4096), nil)
	if err != nil {
		t.Fatalf("read the answer's head: %v", err)
	}
	return resp.StatusCode, c
}

// TestConcurrencyPolicyAcrossGatewaysAndKill runs two gateway binaries on
// one Redis with a policy of kind concurrency: one report download per
// vendor in flight at once over both. A download held on the first
// refuses one on the second (429 rate_limited, Retry-After, the policy not
// in the RateLimit headers); the held download's end frees the slot; and
// when the first gateway is killed with SIGKILL holding the slot (no
// release), the slot is free again within redis.slot_ttl.
func TestConcurrencyPolicyAcrossGatewaysAndKill(t *testing.T) {
	// Not parallel: it times a slot's release against redis.slot_ttl.
	const slotTTL = 3 * time.Second
	s := newStack(t, stackOptions{redis: true, gateways: 2,
		gatewayYAML: "limits:\n  policies:\n    - {name: downloads-at-once, scope: vendor, class: reports, kind: concurrency, rate: 1}\n",
		gatewayEnv:  map[string]string{"GATEWAY_REDIS_SLOT_TTL": slotTTL.String(), "GATEWAY_REDIS_SLOT_REFRESH": "1s"}})
	path, _ := largePDF(t, 16<<20)
	fileURL, key := s.liveReport(path)
	if !strings.HasPrefix(fileURL, s.gwURLs[0]) {
		t.Fatalf("file_url %s is not on the first gateway %s", fileURL, s.gwURLs[0])
	}
	onSecond := s.gwURLs[1] + strings.TrimPrefix(fileURL, s.gwURLs[0])
	get := func() response {
		t.Helper()
		return do(t, "GET", onSecond, key, nil, nil)
	}

	status, c := holdReport(t, fileURL, key)
	if status != 200 {
		t.Fatalf("held download: %d", status)
	}
	r := get()
	if r.status != 429 || r.errorCode() != "rate_limited" {
		t.Fatalf("a second download on the other gateway: %d %s; want 429 rate_limited", r.status, r.body)
	}
	if n, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || n < 1 {
		t.Fatalf("Retry-After %q", r.header.Get("Retry-After"))
	}
	if p := r.header.Get("RateLimit-Policy"); strings.Contains(p, "downloads-at-once") {
		t.Fatalf("RateLimit-Policy %q names the concurrency policy", p)
	}
	// The held download ends (its client goes away): its slot is given back.
	c.Close()
	waitStatus(t, get, 200, 10*time.Second)

	status, _ = holdReport(t, fileURL, key)
	if status != 200 {
		t.Fatalf("held download: %d", status)
	}
	if r := get(); r.status != 429 {
		t.Fatalf("a second download with one held: %d", r.status)
	}
	s.gateways[0].killed = true
	if err := s.gateways[0].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// The slot is free when a download's head says 200: the time to read
	// its 16 MiB body (about a second under -race on a loaded machine) is
	// the test client's, not the slot's.
	var took time.Duration
	for {
		status, c := holdReport(t, onSecond, key)
		took = time.Since(killed)
		c.Close()
		if status == 200 {
			break
		}
		if took > 2*slotTTL {
			t.Fatalf("still %d %s after the kill; want 200", status, took)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the killed gateway's slot was free %s after SIGKILL (redis.slot_ttl %s, refresh 1s)", took.Round(time.Millisecond), slotTTL)
	if took > slotTTL+time.Second {
		t.Fatalf("slot free %s after the kill; the bound is redis.slot_ttl, %s", took, slotTTL)
	}
}

// waitStatus calls get until it answers want, failing after within.
func waitStatus(t *testing.T, get func() response, want int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		r := get()
		if r.status == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %d %s after %s; want %d", r.status, r.body, within, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
