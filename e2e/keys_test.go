package e2e

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"vendorgate/shared/apikey"
	"vendorgate/shared/wire"
)

// backendKeyLookups is how many key lookups the backend has answered,
// whatever their status, read from its own request metric.
func backendKeyLookups(t *testing.T, s *stack) float64 {
	t.Helper()
	var n float64
	for _, line := range strings.Split(scrape(t, s.adminURL), "\n") {
		if !strings.HasPrefix(line, "vendorgate_backend_requests_total{") ||
			!strings.Contains(line, `route="`+wire.KeyLookupPath+`{hash}"`) {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		n += v
	}
	return n
}

// clientFrom is a client whose connections leave from the local address
// from (any of 127.0.0.0/8 is this host's loopback on Linux).
func clientFrom(from string) *fasthttp.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	return &fasthttp.Client{Dial: func(addr string) (net.Conn, error) { return d.Dial("tcp", addr) },
		ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second}
}

func getWithKey(t *testing.T, c *fasthttp.Client, url, key string) (int, string) {
	t.Helper()
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(url)
	req.Header.Set(wire.HeaderAPIKey, key)
	if err := c.Do(req, resp); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode(), string(resp.Body())
}

// randomKey is what a key-guessing attacker sends: the right prefix and a
// random secret of the right shape.
func randomKey(t *testing.T) string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return apikey.DefaultSandboxPrefix + "_" + base64.RawURLEncoding.EncodeToString(b[:])
}

// TestRandomKeyFloodMakesNoBackendLookup: 1,000 random well-formed keys
// from one address, then 1,000 from 100 loopback addresses, make no key
// lookup on the backend. From one address the answers are 401 up to the
// failed-key threshold (100) and 429 past it; spread over 100 addresses
// every address stays under it and every answer is 401. A signed key the
// backend never issued is still looked up (once), which shows the metric
// counts lookups.
func TestRandomKeyFloodMakesNoBackendLookup(t *testing.T) {
	// Not parallel: it floods the gateway.
	s := newStack(t, stackOptions{})
	me := s.gwURLs[0] + "/api/vendor/v1/me"
	base := backendKeyLookups(t, s)

	one := clientFrom("127.0.0.1")
	answers := map[int]int{}
	for i := 0; i < 1000; i++ {
		st, body := getWithKey(t, one, me, randomKey(t))
		answers[st]++
		want, code := 401, "invalid_api_key"
		if i >= 100 {
			want, code = 429, "rate_limited"
		}
		if st != want || !strings.Contains(body, `"code":"`+code+`"`) {
			t.Fatalf("random key %d from one address: %d %s, want %d %s", i, st, body, want, code)
		}
	}
	if n := backendKeyLookups(t, s) - base; n != 0 {
		t.Fatalf("1,000 random keys from one address (answers %v) made %v backend key lookups, want 0", answers, n)
	}

	clients := make([]*fasthttp.Client, 100)
	for i := range clients {
		clients[i] = clientFrom(fmt.Sprintf("127.0.1.%d", i+1))
	}
	for i := 0; i < 1000; i++ {
		if st, body := getWithKey(t, clients[i%100], me, randomKey(t)); st != 401 {
			t.Fatalf("random key %d from 127.0.1.%d: %d %s, want 401", i, i%100+1, st, body)
		}
	}
	if n := backendKeyLookups(t, s) - base; n != 0 {
		t.Fatalf("1,000 random keys from 100 addresses made %v backend key lookups, want 0", n)
	}
	m := scrape(t, s.gwAdmin[0])
	if v := metric(m, "vendorgate_gateway_auth_failures_total", `reason="bad_signature"`); v != 2000 {
		t.Errorf("auth failures for bad_signature = %v, want 2000", v)
	}

	signer, err := apikey.NewSigner([]string{signingSecret})
	if err != nil {
		t.Fatal(err)
	}
	forged, err := signer.Generate(apikey.DefaultPrefixes(), apikey.Sandbox)
	if err != nil {
		t.Fatal(err)
	}
	if st, body := getWithKey(t, clientFrom("127.0.2.1"), me, forged); st != 401 {
		t.Fatalf("signed unknown key: %d %s, want 401", st, body)
	}
	if n := backendKeyLookups(t, s) - base; n != 1 {
		t.Fatalf("a signed unknown key made %v backend key lookups, want 1", n)
	}
}
