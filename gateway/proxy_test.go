package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"vendorgate/config"
	"vendorgate/shared/apierr"
	"vendorgate/shared/testredis"
	"vendorgate/shared/wire"
)

func TestSpoofedIdentityHeadersNeverReachBackend(t *testing.T) {
	_, gw, key, res := startWithKey(t)
	a := do(t, "GET", gw.url+"/api/vendor/v1/me", key,
		"X-Vendor-Id", "vendor-evil", "x-key-id", "evil", "X-Vendor-Environment", "live",
		"X-Internal-Token", "guess", "X-Forwarded-For", "6.6.6.6", "X-Request-Id", "client-rid-1",
		"Connection", "X-Custom-Hop", "X-Custom-Hop", "secret", "Keep-Alive", "timeout=1",
		"Proxy-Authorization", "Basic eDp5", "proxy-connection", "keep-alive")
	if a.status != 200 {
		t.Fatalf("%d %s", a.status, a.body)
	}
	if a.echo[wire.HeaderVendorID] != res.VendorID || a.echo[wire.HeaderKeyID] != res.KeyID || a.echo[wire.HeaderEnvironment] != "sandbox" {
		t.Fatalf("spoofed identity reached the backend: %v", a.echo)
	}
	if a.echo[wire.HeaderInternalToken] != testToken {
		t.Fatal("internal token not the gateway's")
	}
	if a.echo[wire.HeaderForwardedFor] != "127.0.0.1" {
		t.Fatalf("X-Forwarded-For %q from an untrusted peer", a.echo[wire.HeaderForwardedFor])
	}
	if a.echo[wire.HeaderRequestID] != "client-rid-1" || a.header.Get("X-Request-Id") != "client-rid-1" {
		t.Fatalf("client request id not kept: %q %q", a.echo[wire.HeaderRequestID], a.header.Get("X-Request-Id"))
	}
	for _, h := range []string{"X-Custom-Hop", "Keep-Alive", "Proxy-Authorization", "Proxy-Connection"} {
		if _, ok := a.echo[h]; ok {
			t.Fatalf("hop-by-hop header %s reached the backend", h)
		}
	}
	// A request id that is not sane is replaced.
	a = do(t, "GET", gw.url+"/api/vendor/v1/me", key, "X-Request-Id", "bad id with spaces")
	if rid := a.header.Get("X-Request-Id"); rid == "" || strings.Contains(rid, " ") {
		t.Fatalf("request id %q", rid)
	}
}

func TestTrustedProxyForwardedFor(t *testing.T) {
	b := newTestBackend(t)
	gw := startGateway(t, b, func(o *Options) {
		o.Config.TrustedProxies = config.List{"127.0.0.0/8"}
	})
	key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	a := do(t, "GET", gw.url+"/api/vendor/v1/me", key, "X-Forwarded-For", "6.6.6.6, 203.0.113.7, 127.0.0.2")
	if a.echo[wire.HeaderForwardedFor] != "203.0.113.7" {
		t.Fatalf("client %q, want 203.0.113.7", a.echo[wire.HeaderForwardedFor])
	}
}

func TestErrorsAreEnvelopes(t *testing.T) {
	_, gw, key, _ := startWithKey(t)
	t.Run("backend error not in the envelope is wrapped", func(t *testing.T) {
		a := do(t, "GET", gw.url+"/api/vendor/v1/orders/plain-error", key)
		a.wantError(t, 502, apierr.RequestFailed)
	})
	t.Run("backend envelope passes through", func(t *testing.T) {
		a := do(t, "GET", gw.url+"/api/vendor/v1/orders/envelope-error", key)
		a.wantError(t, 404, apierr.NotFound)
		if a.env.Message != "order not found" {
			t.Fatalf("message %q", a.env.Message)
		}
	})
	t.Run("body too large", func(t *testing.T) {
		// A raw request that announces the body and sends none: the server
		// answers from the Content-Length alone, and no client write races
		// the connection it closes (net/http saw a reset now and then).
		conn, err := net.Dial("tcp", strings.TrimPrefix(gw.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(conn, "POST /api/vendor/v1/orders HTTP/1.1\r\nHost: gw\r\nX-API-Key: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", key, 1<<17)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		d, ok := apierr.Parse(body)
		if resp.StatusCode != 413 || !ok || d.Code != apierr.PayloadTooLarge || resp.Header.Get("X-Request-Id") == "" {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
	})
	t.Run("headers too large", func(t *testing.T) {
		a := do(t, "GET", gw.url+"/api/vendor/v1/me", key, "X-Big", strings.Repeat("a", 10000))
		a.wantError(t, 431, apierr.RequestFailed)
	})
	t.Run("malformed request", func(t *testing.T) {
		c, err := net.Dial("tcp", strings.TrimPrefix(gw.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET /api/vendor/v1/me HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		if d, ok := apierr.Parse(body); resp.StatusCode != 400 || !ok || d.Code != apierr.ValidationError {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
	})
	t.Run("panic", func(t *testing.T) {
		gw.g.routes.router.GET("/api/vendor/v1/panic", func(*fasthttp.RequestCtx) { panic("test panic") })
		do(t, "GET", gw.url+"/api/vendor/v1/panic", key).wantError(t, 500, apierr.InternalError)
	})
	t.Run("key lookup unavailable", func(t *testing.T) {
		other := newTestBackend(t)
		gw2 := startGateway(t, other, nil)
		k, _ := other.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
		other.stop()
		a := do(t, "GET", gw2.url+"/api/vendor/v1/me", k)
		a.wantError(t, 503, apierr.RequestFailed)
		retryAfter(t, a)
	})
}

func TestReportStreamsWithoutHopHeaders(t *testing.T) {
	_, gw, key, _ := startWithKey(t)
	a := do(t, "GET", gw.url+"/api/vendor/v1/orders/o1/reports/mvr", key)
	if a.status != 200 || len(a.body) != 3<<20 || a.header.Get("Content-Type") != "application/pdf" {
		t.Fatalf("%d %d %q", a.status, len(a.body), a.header.Get("Content-Type"))
	}
	if a.header.Get("Keep-Alive") != "" || a.header.Get(wire.HeaderVendorID) != "" {
		t.Fatalf("hop-by-hop or internal header reached the client: %v", a.header)
	}
	a.wantCommon(t)
}

func TestInvalidationEvictsAtOnce(t *testing.T) {
	rs := testredis.Start(t)
	b := newTestBackend(t)
	gw := startGateway(t, b, func(o *Options) {
		o.Config.Redis.URL = config.List{rs.URL()}
		o.Config.Limits.Vendor.Reads = config.Limit{Rate: 1000, Period: time.Minute}
	})
	key, res := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	me := gw.url + "/api/vendor/v1/me"
	waitSubscribed(t, rs)
	if a := do(t, "GET", me, key); a.status != 200 {
		t.Fatalf("%d", a.status)
	}
	// Revoke at the backend: the cache (TTL 30s) still admits the key...
	b.update(key, func(r *wire.KeyResolution) { ts := time.Now(); r.RevokedAt = &ts })
	if a := do(t, "GET", me, key); a.status != 200 {
		t.Fatalf("cached key refused: %d", a.status)
	}
	// ...until the backend announces it.
	rs.Do(t, "PUBLISH", wire.InvalidationChannel, `{"key_hash":"`+hashOf(key)+`"}`)
	waitStatus(t, me, key, 401)

	key2, _ := b.addKey("vendor-b", wire.VendorApproved, time.Now().Add(time.Hour))
	if a := do(t, "GET", me, key2); a.status != 200 {
		t.Fatalf("%d", a.status)
	}
	b.update(key2, func(r *wire.KeyResolution) { r.Vendor.Status = wire.VendorPending })
	rs.Do(t, "PUBLISH", wire.InvalidationChannel, `{"vendor_id":"vendor-b"}`)
	waitStatus(t, me, key2, 403)
	_ = res
}

func waitSubscribed(t *testing.T, rs *testredis.Server) {
	deadline := time.Now().Add(5 * time.Second)
	for rs.Do(t, "PUBSUB", "NUMSUB", wire.InvalidationChannel) == "" || !strings.Contains(pubsubCount(t, rs), "1") {
		if time.Now().After(deadline) {
			t.Fatal("gateway did not subscribe")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func pubsubCount(t *testing.T, rs *testredis.Server) string {
	return rs.Do(t, "PUBSUB", "NUMPAT") + rs.Do(t, "PUBLISH", wire.InvalidationChannel, `{}`)
}

func waitStatus(t *testing.T, url, key string, status int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		a := do(t, "GET", url, key)
		if a.status == status {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("status %d, want %d", a.status, status)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
