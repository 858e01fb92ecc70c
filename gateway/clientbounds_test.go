package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"vendorgate/config"
	"vendorgate/shared/apierr"
	"vendorgate/shared/testbuild"
)

// announce writes the headers of a request announcing a body of n bytes,
// and no byte of the body.
func announce(t testing.TB, c net.Conn, method, path, key string, n int) {
	t.Helper()
	h := method + " " + path + " HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: " + fmt.Sprint(n) + "\r\n"
	if key != "" {
		h += "X-API-Key: " + key + "\r\n"
	}
	if _, err := io.WriteString(c, h+"\r\n"); err != nil {
		t.Fatal(err)
	}
}

// readAnswer reads one answer from c within d.
func readAnswer(c net.Conn, d time.Duration) (answer, error) {
	_ = c.SetReadDeadline(time.Now().Add(d))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, header: resp.Header, body: body, closes: resp.Close}
	a.env, a.isEnv = apierr.Parse(body)
	return a, nil
}

func dialGateway(t testing.TB, gw *testGateway) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(gw.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// Connections that send only the headers of a POST announcing 1 MiB, with
// no key, made the gateway set aside 1 MiB each before it looked at the
// key. Now they hold no body memory and are answered 401 at once.
func TestUnauthenticatedBodiesHoldNoMemory(t *testing.T) {
	const conns = 200
	b := newTestBackend(t)
	gw := startGateway(t, b, func(o *Options) {
		o.Config.MaxBodyBytes = 1 << 20 // the default ceiling
		o.Config.TrustedProxies = config.List{"127.0.0.1"}
		o.Config.FailedKeys.PerAddress = 1 << 20 // count, never throttle here
	})
	base := heapInUse()
	cs := make([]net.Conn, conns)
	for i := range cs {
		cs[i] = dialGateway(t, gw)
		announce(t, cs[i], "POST", "/api/vendor/v1/orders", "", 1<<20)
	}
	// Hold the connections while the server has read every header: before
	// the fix each waits for its megabyte with the buffer allocated.
	var peak uint64
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		peak = max(peak, m.HeapInuse)
		time.Sleep(50 * time.Millisecond)
	}
	grew := int64(peak) - int64(base)
	t.Logf("heap in use: %d MiB before, %d MiB at peak with %d connections", base>>20, peak>>20, conns)
	if grew > 32<<20 {
		t.Errorf("%d connections announcing 1 MiB without a key grew the heap by %d MiB; want under 32", conns, grew>>20)
	}
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for _, c := range cs {
		wg.Add(1)
		go func(c net.Conn) {
			defer wg.Done()
			a, err := readAnswer(c, 5*time.Second)
			switch {
			case err != nil:
				errs <- err
			case a.status != 401 || a.env.Code != apierr.InvalidAPIKey:
				errs <- fmt.Errorf("%d %s, want 401 invalid_api_key", a.status, a.body)
			}
		}(c)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a connection without a key: %v", err)
	}
	// Once they are gone, nothing of theirs is kept (within 10 %, or 1 MiB
	// of noise): heapInUse collects twice, so that pooled buffers
	// (sync.Pool's victim cache) go too.
	for _, c := range cs {
		c.Close()
	}
	time.Sleep(200 * time.Millisecond) // the server closes its side
	heapInUse()
	after := heapInUse()
	t.Logf("heap in use %.1f MiB after the connections closed (%.1f MiB before)", float64(after)/(1<<20), float64(base)/(1<<20))
	if int64(after)-int64(base) > max(int64(base)/10, 1<<20) {
		t.Errorf("heap in use %d MiB after the connections closed, %d MiB before", after>>20, base>>20)
	}
}

// The body limits by route: an order with a signed key up to
// OrderBodyBytes, no body anywhere else; a refused body is never read, and
// the answer is the one the flow gives from the headers.
func TestBodyLimits(t *testing.T) {
	b := newTestBackend(t)
	gw := startGateway(t, b, func(o *Options) {
		o.Config.MaxBodyBytes = 1 << 20
		o.Config.Limits.Vendor.Orders.Rate = 100
		o.Config.FailedKeys.PerAddress = 3
	})
	key, _ := b.addKey("vendor-a", "approved", time.Now().Add(time.Hour))
	unknown := signedKey(t) // signed, but no backend record
	order := `{"mc_number":"MC123","driver":{"first_name":"` + strings.Repeat(`\u00e9`, 700) + `"},"services":["mvr"]}`
	if len(order) < 4000 {
		t.Fatalf("the order is %d bytes; want one as large as a valid order gets", len(order))
	}
	post := func(key, body string, extra string) answer {
		t.Helper()
		raw := "POST /api/vendor/v1/orders HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n" + extra
		if key != "" {
			raw += "X-API-Key: " + key + "\r\n"
		}
		return rawDo(t, gw, raw+fmt.Sprintf("Content-Length: %d\r\n\r\n", len(body))+body)
	}
	t.Run("order within the limit", func(t *testing.T) {
		a := post(key, order, "")
		if a.status != 200 || a.echo["body"] != order {
			t.Fatalf("%d, backend saw %d bytes; want 200 and the whole order", a.status, len(a.echo["body"]))
		}
	})
	t.Run("17 KiB order", func(t *testing.T) {
		post(key, strings.Repeat(" ", 17<<10-len(order))+order, "").wantError(t, 413, apierr.PayloadTooLarge)
	})
	t.Run("17 KiB order announced, not sent", func(t *testing.T) {
		c := dialGateway(t, gw)
		announce(t, c, "POST", "/api/vendor/v1/orders", key, 17<<10)
		a, err := readAnswer(c, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		a.wantError(t, 413, apierr.PayloadTooLarge)
	})
	t.Run("17 KiB order chunked", func(t *testing.T) {
		body := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", 17<<10, strings.Repeat("x", 17<<10))
		rawDo(t, gw, "POST /api/vendor/v1/orders HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\nX-API-Key: "+key+"\r\n\r\n"+body).
			wantError(t, 413, apierr.PayloadTooLarge)
	})
	t.Run("signed but unknown key announcing 1 MiB", func(t *testing.T) {
		c := dialGateway(t, gw)
		announce(t, c, "POST", "/api/vendor/v1/orders", unknown, 1<<20)
		a, err := readAnswer(c, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		// Its MAC is ours, so it may send an order; refused unread past the
		// order limit, it is answered as the flow answers it: no such key.
		a.wantError(t, 401, apierr.InvalidAPIKey)
	})
	t.Run("GET with a body announced", func(t *testing.T) {
		for _, k := range []string{key, ""} {
			c := dialGateway(t, gw)
			announce(t, c, "GET", "/api/vendor/v1/me", k, 1<<20)
			a, err := readAnswer(c, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if k != "" {
				a.wantError(t, 413, apierr.PayloadTooLarge)
			} else {
				a.wantError(t, 401, apierr.InvalidAPIKey)
			}
		}
	})
	t.Run("routing first", func(t *testing.T) {
		for path, want := range map[string]int{"/api/vendor/v1/nope": 404, "/api/vendor/v1/me": 405, "/docs": 405} {
			c := dialGateway(t, gw)
			announce(t, c, "POST", path, key, 1<<20)
			a, err := readAnswer(c, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if a.status != want {
				t.Errorf("POST %s announcing 1 MiB: %d %s, want %d", path, a.status, a.body, want)
			}
		}
	})
	// Last: it trips the failed-key throttle of 127.0.0.1.
	t.Run("no key and a bad key are counted by the failed-key throttle", func(t *testing.T) {
		bad := key[:len(key)-4] + "AAAA"
		var got []int
		for i := 0; i < 5; i++ {
			k := []string{"", bad}[i%2]
			c := dialGateway(t, gw)
			announce(t, c, "POST", "/api/vendor/v1/orders", k, 1<<20)
			a, err := readAnswer(c, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, a.status)
			if a.status == 429 {
				a.wantError(t, 429, apierr.RateLimited)
				return
			}
			a.wantError(t, 401, apierr.InvalidAPIKey)
		}
		t.Fatalf("answers %v: the throttle (3 failures per address) never answered 429", got)
	})
}

// A refused key costs a client its connection only when the request's
// body was not read: a request that carried none (or one within its limit)
// is answered 401 on a connection that stays open, so that a client
// retrying with the right key pays no new connection. A POST announcing
// more than it may send is answered and closed: the unread body would be
// read as the next request.
func TestRefusedKeyKeepsConnection(t *testing.T) {
	b := newTestBackend(t)
	gw := startGateway(t, b, nil)
	key, _ := b.addKey("vendor-a", "approved", time.Now().Add(time.Hour))
	c := dialGateway(t, gw)
	for _, tc := range []struct{ name, raw string }{
		{"GET without a key", "GET /api/vendor/v1/me HTTP/1.1\r\nHost: gw\r\n\r\n"},
		{"POST without a key, no body", "POST /api/vendor/v1/orders HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: 0\r\n\r\n"},
		{"GET with an unknown key", "GET /api/vendor/v1/me HTTP/1.1\r\nHost: gw\r\nX-API-Key: " + signedKey(t) + "\r\n\r\n"},
	} {
		if _, err := io.WriteString(c, tc.raw); err != nil {
			t.Fatalf("%s: the connection was closed: %v", tc.name, err)
		}
		a, err := readAnswer(c, 5*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		a.wantError(t, 401, apierr.InvalidAPIKey)
		if a.closes {
			t.Fatalf("%s: answered with Connection: close", tc.name)
		}
	}
	if _, err := io.WriteString(c, "GET /api/vendor/v1/me HTTP/1.1\r\nHost: gw\r\nX-API-Key: "+key+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if a, err := readAnswer(c, 5*time.Second); err != nil || a.status != 200 {
		t.Fatalf("the right key on the same connection: %v %d %s", err, a.status, a.body)
	}

	unread := dialGateway(t, gw)
	announce(t, unread, "POST", "/api/vendor/v1/orders", "", 1<<20)
	a, err := readAnswer(unread, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	a.wantError(t, 401, apierr.InvalidAPIKey)
	if !a.closes {
		t.Fatal("a body refused unread: answered without Connection: close")
	}
	if _, err := unread.Read(make([]byte, 1)); err == nil {
		t.Fatal("a body refused unread: the connection stayed open")
	}
}

// One peer holds at most max_conns_per_peer connections; one more is
// answered with the envelope and closed, and a trusted proxy is exempt.
func TestConnectionsPerPeer(t *testing.T) {
	const bound = 4
	t.Run("bounded", func(t *testing.T) {
		b := newTestBackend(t)
		gw := startGateway(t, b, func(o *Options) {
			o.Config.MaxConnsPerPeer = bound
			o.Config.Limits.Vendor.Reads.Rate = 1000
		})
		key, _ := b.addKey("vendor-a", "approved", time.Now().Add(time.Hour))
		held := make([]net.Conn, bound)
		for i := range held {
			held[i] = dialGateway(t, gw)
		}
		// The listener counts a connection when it accepts it: one request
		// on each makes sure all are.
		for _, c := range held {
			if _, err := io.WriteString(c, "GET /api/vendor/v1/me HTTP/1.1\r\nHost: gw\r\nX-API-Key: "+key+"\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			if a, err := readAnswer(c, 5*time.Second); err != nil || a.status != 200 {
				t.Fatalf("a connection within the bound: %v %d %s", err, a.status, a.body)
			}
		}
		over := dialGateway(t, gw)
		_, _ = io.WriteString(over, "GET /api/vendor/v1/me HTTP/1.1\r\nHost: gw\r\nX-API-Key: "+key+"\r\n\r\n")
		a, err := readAnswer(over, 5*time.Second)
		if err != nil {
			t.Fatalf("connection %d: %v", bound+1, err)
		}
		a.wantError(t, 429, apierr.RateLimited)
		if a.header.Get("Retry-After") == "" {
			t.Fatalf("refusal headers: %v", a.header)
		}
		if _, err := over.Read(make([]byte, 1)); err == nil {
			t.Fatal("the refused connection stayed open")
		}
		if n := metricValue(t, gw, `vendorgate_gateway_connections_refused_total{reason="open"}`); n != 1 {
			t.Fatalf(`connections_refused_total{reason="open"} %v, want 1`, n)
		}
		// A place given back is taken again.
		held[0].Close()
		var last answer
		for i := 0; i < 50; i++ {
			c := dialGateway(t, gw)
			_, _ = io.WriteString(c, "GET /api/vendor/v1/me HTTP/1.1\r\nHost: gw\r\nX-API-Key: "+key+"\r\n\r\n")
			if last, err = readAnswer(c, 5*time.Second); err == nil && last.status == 200 {
				return
			}
			c.Close()
			time.Sleep(20 * time.Millisecond) // the server closes its side
		}
		t.Fatalf("no connection admitted after one closed: %d %s", last.status, last.body)
	})
	t.Run("trusted proxy exempt", func(t *testing.T) {
		b := newTestBackend(t)
		gw := startGateway(t, b, func(o *Options) {
			o.Config.MaxConnsPerPeer = bound
			o.Config.Limits.Vendor.Reads.Rate = 1000
			o.Config.TrustedProxies = config.List{"127.0.0.1"}
		})
		key, _ := b.addKey("vendor-a", "approved", time.Now().Add(time.Hour))
		for i := 0; i < 3*bound; i++ {
			c := dialGateway(t, gw)
			_, _ = io.WriteString(c, "GET /api/vendor/v1/me HTTP/1.1\r\nHost: gw\r\nX-Forwarded-For: 203.0.113.9\r\nX-API-Key: "+key+"\r\n\r\n")
			a, err := readAnswer(c, 5*time.Second)
			if err != nil || a.status != 200 {
				t.Fatalf("connection %d through a trusted proxy: %v %d %s", i+1, err, a.status, a.body)
			}
		}
	})
}

// One peer opens at most max_new_conns_per_peer connections a second,
// however few it holds: one more is answered with the envelope and closed,
// counted with reason "rate"; another peer opening its first at the same
// moment is served, and a trusted proxy is exempt.
func TestNewConnectionsPerPeer(t *testing.T) {
	const rate = 2 // a second: two at once, then one every 500 ms
	request := func(c net.Conn, key, from string) (answer, error) {
		_, _ = io.WriteString(c, "GET /api/vendor/v1/me HTTP/1.1\r\nHost: gw\r\nX-Forwarded-For: "+from+"\r\nX-API-Key: "+key+"\r\n\r\n")
		return readAnswer(c, 5*time.Second)
	}
	t.Run("bounded", func(t *testing.T) {
		b := newTestBackend(t)
		gw := startGateway(t, b, func(o *Options) {
			o.Config.MaxNewConnsPerPeer = rate
			o.Config.Limits.Vendor.Reads.Rate = 1000
		})
		key, _ := b.addKey("vendor-a", "approved", time.Now().Add(time.Hour))
		// Back to back: well within 500 ms of each other.
		admitted := []net.Conn{dialGatewayFrom(t, gw, "127.0.0.1"), dialGatewayFrom(t, gw, "127.0.0.1")}
		over := dialGatewayFrom(t, gw, "127.0.0.1")
		other := dialGatewayFrom(t, gw, "127.0.0.2")
		a, err := request(over, key, "198.51.100.1") // answered, refused, once it asks
		if err != nil {
			t.Fatalf("connection %d within the second: %v", rate+1, err)
		}
		a.wantError(t, 429, apierr.RateLimited)
		if a.header.Get("Retry-After") == "" || !strings.Contains(a.env.Message, "new connections") {
			t.Fatalf("refusal: %v %s", a.header, a.body)
		}
		if _, err := over.Read(make([]byte, 1)); err == nil {
			t.Fatal("the refused connection stayed open")
		}
		for i, c := range append(admitted, other) {
			if a, err := request(c, key, "198.51.100.1"); err != nil || a.status != 200 {
				t.Fatalf("connection %d: %v %d %s; want it served", i+1, err, a.status, a.body)
			}
		}
		if n := metricValue(t, gw, `vendorgate_gateway_connections_refused_total{reason="rate"}`); n != 1 {
			t.Fatalf(`connections_refused_total{reason="rate"} %v, want 1`, n)
		}
		if n := metricValue(t, gw, `vendorgate_gateway_connections_refused_total{reason="open"}`); n != 0 {
			t.Fatalf(`connections_refused_total{reason="open"} %v, want 0`, n)
		}
	})
	t.Run("trusted proxy exempt", func(t *testing.T) {
		b := newTestBackend(t)
		gw := startGateway(t, b, func(o *Options) {
			o.Config.MaxNewConnsPerPeer = rate
			o.Config.Limits.Vendor.Reads.Rate = 1000
			o.Config.TrustedProxies = config.List{"127.0.0.1"}
		})
		key, _ := b.addKey("vendor-a", "approved", time.Now().Add(time.Hour))
		conns := make([]net.Conn, 5*rate)
		for i := range conns {
			conns[i] = dialGatewayFrom(t, gw, "127.0.0.1")
		}
		for i, c := range conns {
			if a, err := request(c, key, "203.0.113.9"); err != nil || a.status != 200 {
				t.Fatalf("connection %d through a trusted proxy: %v %d %s", i+1, err, a.status, a.body)
			}
		}
	})
}

// dialGatewayFrom opens a connection to the gateway's public listener from
// the loopback address src.
func dialGatewayFrom(t testing.TB, gw *testGateway, src string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", strings.TrimPrefix(gw.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// metricValue reads one sample (its name with its labels, as /metrics
// prints them) from the gateway's /metrics.
func metricValue(t testing.TB, gw *testGateway, name string) float64 {
	t.Helper()
	resp, err := http.Get(gw.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err == nil {
				return f
			}
		}
	}
	t.Fatalf("no sample %s in /metrics", name)
	return 0
}

// The per-request decision runs on every request's headers: it must not
// allocate.
func TestHeaderReceivedAllocs(t *testing.T) {
	if testbuild.Race {
		t.Skip("the race detector allocates on its own: run without -race")
	}
	b := newTestBackend(t)
	gw := startGateway(t, b, nil)
	key, _ := b.addKey("vendor-a", "approved", time.Now().Add(time.Hour))
	for _, tc := range []struct{ method, key string }{{"POST", key}, {"POST", ""}, {"POST", "vgsandbx_nope"}, {"GET", key}} {
		var h fasthttp.RequestHeader
		h.SetMethod(tc.method)
		h.SetRequestURI("/api/vendor/v1/orders")
		if tc.key != "" {
			h.Set("X-API-Key", tc.key)
		}
		if n := testing.AllocsPerRun(200, func() { gw.g.bounds.headerReceived(&h) }); n != 0 {
			t.Errorf("%s with key %q: %.1f allocations", tc.method, tc.key, n)
		}
	}
	var h fasthttp.RequestHeader
	h.SetMethod("POST")
	h.Set("X-API-Key", key)
	// An order's body is read under a fresh read_timeout; any other
	// request's (at most one byte) under its headers' own, not set again.
	if rc := gw.g.bounds.headerReceived(&h); rc.MaxRequestBodySize != gw.cfg.OrderBodyLimit() || rc.ReadTimeout != gw.cfg.ReadTimeout {
		t.Fatalf("a signed POST gets %d bytes and read timeout %s, want %d and %s", rc.MaxRequestBodySize, rc.ReadTimeout,
			gw.cfg.OrderBodyLimit(), gw.cfg.ReadTimeout)
	}
	h.Del("X-API-Key")
	if rc := gw.g.bounds.headerReceived(&h); rc.MaxRequestBodySize != noBodyBytes || rc.ReadTimeout != 0 {
		t.Fatalf("a POST without a key gets %d bytes and read timeout %s, want %d and none", rc.MaxRequestBodySize, rc.ReadTimeout, noBodyBytes)
	}
	h.SetMethod("GET")
	h.Set("X-API-Key", key)
	if rc := gw.g.bounds.headerReceived(&h); rc.ReadTimeout != 0 {
		t.Fatalf("a read gets read timeout %s again, want the headers' own", rc.ReadTimeout)
	}
}

// A client refused for opening connections too fast gets the 429 envelope
// as the answer to its request, as an HTTP client expects, not an answer
// before it asked (Go's client calls that a broken connection).
func TestRefusedConnectionAnswersTheRequest(t *testing.T) {
	b := newTestBackend(t)
	gw := startGateway(t, b, func(o *Options) {
		o.Config.MaxNewConnsPerPeer = 1
		o.Config.Limits.Vendor.Reads.Rate = 1000
	})
	key, _ := b.addKey("vendor-a", "approved", time.Now().Add(time.Hour))
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	refused := 0
	for i := 0; i < 20; i++ {
		req, _ := http.NewRequest("GET", gw.url+"/api/vendor/v1/me", nil)
		req.Header.Set("X-API-Key", key)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v; want an answer (200, or 429 for a connection over the bound)", i+1, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case 200:
		case 429:
			refused++
		default:
			t.Fatalf("request %d: %d", i+1, resp.StatusCode)
		}
	}
	if refused == 0 {
		t.Fatal("20 connections back to back at a bound of 1 a second: none refused")
	}
}
