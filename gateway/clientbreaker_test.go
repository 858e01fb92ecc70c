package gateway

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"vendorgate/config"
	"vendorgate/shared/apierr"
	"vendorgate/shared/wire"
)

// rawPipeline writes raw to the gateway in one write and reads n answers
// from the same connection, in order.
func rawPipeline(t testing.TB, gw *testGateway, raw string, n int) []answer {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(gw.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	out := make([]answer, 0, n)
	for i := 0; i < n; i++ {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("read answer %d of %d: %v", i+1, n, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		a := answer{status: resp.StatusCode, header: resp.Header, body: body}
		a.env, a.isEnv = apierr.Parse(body)
		if resp.StatusCode < 300 {
			_ = json.Unmarshal(body, &a.echo)
		}
		out = append(out, a)
	}
	return out
}

// breakerRig is a gateway whose backend breaker would open after three
// counted failures and then stay open for the rest of the test, with two
// vendors: a, who sends what a client can get wrong, and b, who is served.
type breakerRig struct {
	b          *testBackend
	gw         *testGateway
	keyA, keyB string
}

func newBreakerRig(t *testing.T, mod func(*Options)) *breakerRig {
	b := newTestBackend(t)
	gw := startGateway(t, b, func(o *Options) {
		o.Config.Proxy.BreakerFailures = 3
		o.Config.Proxy.BreakerOpenFor = time.Minute // an opened breaker is still open when checked
		o.Config.Limits.Vendor.Reads = config.Limit{Rate: 1000, Period: time.Minute}
		o.Config.Limits.Vendor.Orders = config.Limit{Rate: 1000, Period: time.Minute}
		if mod != nil {
			mod(o)
		}
	})
	keyA, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	keyB, _ := b.addKey("vendor-b", wire.VendorApproved, time.Now().Add(time.Hour))
	return &breakerRig{b: b, gw: gw, keyA: keyA, keyB: keyB}
}

// wantBackendServed checks that what a client did left the backend's
// breaker closed: vendor b's ordinary GET /me is answered by the backend,
// /readyz reports the backend ok, and the breaker never moved.
func (r *breakerRig) wantBackendServed(t *testing.T) {
	t.Helper()
	if a := do(t, "GET", r.gw.url+"/api/vendor/v1/me", r.keyB); a.status != 200 || a.echo[wire.HeaderVendorID] != "vendor-b" {
		t.Errorf("vendor b's GET /me: %d %s", a.status, a.body)
	}
	if code, body := getReadyz(t, r.gw, "?verbose"); code != 200 || checkStatus(body, "backend") != "ok" {
		t.Errorf("/readyz: %d %+v", code, body)
	}
	m := scrape(t, r.gw)
	if strings.Contains(grep(grep(m, "breaker_transitions_total"), `breaker="backend:`), `to="open"`) ||
		!strings.Contains(m, `vendorgate_gateway_breaker_state{breaker="backend:`+r.b.addr+`"} 0`) {
		t.Errorf("the backend breaker moved:\n%s", grep(m, "breaker_"))
	}
}

// checkStatus is the status /readyz gives the check named name.
func checkStatus(b readyzBody, name string) string {
	for _, c := range b.Checks {
		if c.Name == name {
			return c.Status
		}
	}
	return ""
}

// A request target in absolute form (RFC 9112 3.2.2) with a scheme other
// than the backend's made the gateway's HTTP client fail before it sent
// anything, and that failure counted against the backend's breaker: five
// such requests from one vendor, and every vendor was answered 503. The
// target's scheme and host are the client's words, not where the gateway
// sends the request: each is the normal proxied answer, and the breaker
// stays closed. The backend sees its own host and no user info.
func TestAbsoluteFormTargetLeavesBreakerClosed(t *testing.T) {
	for _, target := range []string{
		"https://x/api/vendor/v1/me",
		"HTTPS://x/api/vendor/v1/me",
		"https:///api/vendor/v1/me",
		"http://elsewhere.example:9/api/vendor/v1/me",
		"https://x/api/vendor/v1/orders?limit=5",
		"https://user:secret@x/api/vendor/v1/me",
	} {
		t.Run(target, func(t *testing.T) {
			r := newBreakerRig(t, nil)
			one := "GET " + target + " HTTP/1.1\r\nHost: x\r\nX-API-Key: " + r.keyA + "\r\n\r\n"
			for i, a := range rawPipeline(t, r.gw, strings.Repeat(one, 5), 5) {
				if a.status != 200 || a.echo[wire.HeaderVendorID] != "vendor-a" {
					t.Errorf("request %d: %d %s, want the proxied answer", i+1, a.status, a.body)
				}
				if a.echo["Host"] != r.b.addr || a.echo["Authorization"] != "" {
					t.Errorf("request %d: the backend saw Host %q, Authorization %q", i+1, a.echo["Host"], a.echo["Authorization"])
				}
			}
			r.wantBackendServed(t)
		})
	}
}

// What else a client can get wrong is refused or served without a word
// to the backend's breaker: a request the server cannot read, a body over
// the limit, an HTTP/1.0 request without Host. Each is sent more often
// than the failures that would open the breaker.
func TestClientMistakesLeaveBreakerClosed(t *testing.T) {
	for _, c := range []struct {
		name string
		raw  string
		want int
	}{
		{"http/1.0 without host", "GET /api/vendor/v1/me HTTP/1.0\r\nX-API-Key: KEY\r\n\r\n", 200},
		{"http/1.1 without host", "GET /api/vendor/v1/me HTTP/1.1\r\nX-API-Key: KEY\r\n\r\n", 400},
		{"host with a space", "GET /api/vendor/v1/me HTTP/1.1\r\nHost: a b\r\nX-API-Key: KEY\r\n\r\n", 400},
		{"two hosts", "GET /api/vendor/v1/me HTTP/1.1\r\nHost: a\r\nHost: b\r\nX-API-Key: KEY\r\n\r\n", 400},
		{"transfer-encoding gzip", "POST /api/vendor/v1/orders HTTP/1.1\r\nHost: x\r\nX-API-Key: KEY\r\nContent-Type: application/json\r\n" +
			"Transfer-Encoding: gzip, chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", 400},
		{"body too large", "POST /api/vendor/v1/orders HTTP/1.1\r\nHost: x\r\nX-API-Key: KEY\r\nContent-Type: application/json\r\n" +
			"Content-Length: 70000\r\n\r\n{", 413},
		{"authority form", "GET x:80 HTTP/1.1\r\nHost: x\r\nX-API-Key: KEY\r\n\r\n", 400},
		// Reads carry no body: one announced is refused unread (clientbounds.go).
		{"get with a body", "GET /api/vendor/v1/me HTTP/1.1\r\nHost: x\r\nX-API-Key: KEY\r\nContent-Length: 5\r\n\r\nhello", 413},
		{"upgrade", "GET /api/vendor/v1/me HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: h2c\r\nX-API-Key: KEY\r\n\r\n", 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newBreakerRig(t, nil)
			raw := strings.ReplaceAll(c.raw, "KEY", r.keyA)
			for i := 0; i < 5; i++ {
				if a := rawDo(t, r.gw, raw); a.status != c.want {
					t.Fatalf("request %d: %d %s, want %d", i+1, a.status, a.body, c.want)
				}
			}
			if n := r.b.calls.Load(); c.want != 200 && n != 0 {
				t.Errorf("%d refused requests reached the backend", n)
			}
			r.wantBackendServed(t)
		})
	}
}

// A report download the client abandons (it hangs up after the head, or
// stops reading until the gateway cuts it) fails on the client's side of
// the gateway: the backend sent what it was asked, and its breaker stays
// closed however many clients do so at once.
func TestAbandonedReportsLeaveBreakerClosed(t *testing.T) {
	const size = 16 << 20 // more than the sockets between client and backend buffer
	body, _ := randomBody(t, size)
	r := newBreakerRig(t, func(o *Options) {
		o.Config.Proxy.StreamIdleTimeout = time.Second
		o.Config.Proxy.Timeout = 10 * time.Second // five 16 MiB answers at once under -race start slowly
	})
	r.b.setReport(func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/pdf")
		ctx.SetBody(body)
	})
	report := r.gw.url + "/api/vendor/v1/orders/o1/reports/mvr"
	t.Run("hang up after the head", func(t *testing.T) {
		for i := 0; i < 5; i++ {
			a := rawDoHead(t, r.gw, "GET /api/vendor/v1/orders/o1/reports/mvr HTTP/1.1\r\nHost: x\r\nX-API-Key: "+r.keyA+"\r\n\r\n")
			if a != 200 {
				t.Fatalf("download %d: %d", i+1, a)
			}
		}
		r.wantBackendServed(t)
	})
	t.Run("stop reading", func(t *testing.T) {
		// Each client reads the head, then nothing until the gateway has
		// let go of all five downloads (downloadsLetGo), once the five
		// heads came.
		var heads sync.WaitGroup
		heads.Add(5)
		letGo := downloadsLetGo(t, r.gw)
		cut := func() {
			heads.Done()
			heads.Wait()
			letGo()
		}
		var wg sync.WaitGroup
		got := make([]download, 5)
		for i := range got {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[i] = fetch(t, report, r.keyA, client{waitFor: cut, smallBuffer: true, limit: 20 * time.Second})
			}()
		}
		wg.Wait()
		for i, d := range got {
			if d.status != 200 || d.err == nil || d.n >= size {
				t.Fatalf("stalled download %d: status %d, %d of %d bytes, read error %v; want it cut short", i+1, d.status, d.n, size, d.err)
			}
		}
		r.wantBackendServed(t)
	})
}

// rawDoHead sends raw, reads the answer's status line and hangs up.
func rawDoHead(t testing.TB, gw *testGateway, raw string) int {
	t.Helper()
	resp, c := rawSend(t, gw, raw)
	c.Close()
	return resp.StatusCode
}

// Keys a client makes up (signed, so looked up, but unknown) are answered
// 404 by the key lookup: the backend's answer, not its failure. The lookup
// breaker stays closed, and another vendor's key not yet cached resolves.
func TestUnknownKeysLeaveLookupBreakerClosed(t *testing.T) {
	r := newBreakerRig(t, nil) // the lookup breaker opens after 3 failures too
	for i := 0; i < 8; i++ {
		do(t, "GET", r.gw.url+"/api/vendor/v1/me", signedKey(t)).wantError(t, 401, apierr.InvalidAPIKey)
	}
	if n := r.b.lookups.Load(); n < 8 {
		t.Fatalf("%d lookups for 8 unknown keys: the test did not reach the lookup", n)
	}
	m := scrape(t, r.gw)
	if !strings.Contains(m, `vendorgate_gateway_breaker_state{breaker="key_lookup"} 0`) || strings.Contains(grep(m, `breaker="key_lookup"`), `to="open"`) {
		t.Fatalf("the lookup breaker moved:\n%s", grep(m, "breaker_"))
	}
	r.wantBackendServed(t) // vendor b's key is looked up now
}
