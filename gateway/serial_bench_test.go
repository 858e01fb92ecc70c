package gateway

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"vendorgate/config"
	"vendorgate/shared/testcert"
	"vendorgate/shared/testredis"
	"vendorgate/shared/wire"
)

// The serial benchmarks send one request at a time, from one goroutine, so
// that a run's instruction count under callgrind is repeatable whatever
// else the machine runs (docs/bench.md, "Where the microseconds go"): the
// per-request count is the difference between two runs of different
// lengths (-benchtime=Nx), divided by the difference in requests. Each has
// a gateway and a bare sub-benchmark over the same test backend.

// BenchmarkProxiedSerial is BenchmarkProxiedVsBare's handler-level request
// (no client socket, no listener), one at a time.
func BenchmarkProxiedSerial(b *testing.B) {
	rig := newHandlerRig(b, func(o *Options) {
		o.Logger = slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	bare := &handlerRig{h: bareProxy(rig.backend), key: rig.key, peer: rig.peer}
	for _, r := range []struct {
		name string
		rig  *handlerRig
	}{{"gateway", rig}, {"bare", bare}} {
		b.Run(r.name, func(b *testing.B) {
			var req fasthttp.Request
			var ctx fasthttp.RequestCtx
			b.ReportAllocs()
			for b.Loop() {
				if err := r.rig.read(&req, &ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// loadBareServer is the load benchmark's bare proxy (bench/loadbench,
// roles.go): a fasthttp server with an idle timeout only, handing every
// request to a HostClient with 10 s read and write timeouts.
func loadBareServer(tb testing.TB, backend string) string {
	return startBareServer(tb, backend, nil, false)
}

// contractHeaders are the headers the gateway's benchmark read carries
// besides a bare proxy's, each value as long as the gateway's (a key
// within its expiry warning; the request id of a run of 10,000 to
// 99,999 requests): the identity the backend reads, and the answer's
// RateLimit, no-store, request id and key expiry.
var contractHeaders = struct{ req, resp [][2][]byte }{
	req: [][2][]byte{
		{[]byte(wire.HeaderInternalToken), []byte("test-internal-token-0123456789")},
		{[]byte(wire.HeaderVendorID), []byte("vendor-bench")},
		{[]byte(wire.HeaderKeyID), []byte("key-3tFQSV20")},
		{[]byte(wire.HeaderEnvironment), []byte("sandbox")},
		{[]byte(wire.HeaderRequestID), []byte("ab83991c-12345")},
		{[]byte(wire.HeaderForwardedFor), []byte("127.0.0.1")},
	},
	resp: [][2][]byte{
		{[]byte("Ratelimit-Policy"), []byte(`"reads";q=1073741824;w=1`)},
		{[]byte("Ratelimit"), []byte(`"reads";r=1073741823;t=1`)},
		{[]byte("Cache-Control"), []byte("no-store")},
		{[]byte(wire.HeaderRequestID), []byte("ab83991c-12345")},
		{[]byte("X-Api-Key-Expiration"), []byte("2026-12-06T06:52:23Z")},
	},
}

// startBareServer is the load benchmark's bare proxy over TLS with cfg
// (nil: plain); with headers, it also takes the API key out of the
// request and writes contractHeaders, as cheaply as fasthttp can (names
// as its normalization spells them, values made once): what any proxy
// that answers as the gateway does pays at least, its client and backend
// included.
func startBareServer(tb testing.TB, backend string, cfg *tls.Config, headers bool) string {
	hc := &fasthttp.HostClient{Addr: backend, MaxConns: 1024, MaxIdemponentCallAttempts: 1, NoDefaultUserAgentHeader: true,
		ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second}
	srv := &fasthttp.Server{Name: "loadbench", NoDefaultServerHeader: true, IdleTimeout: 30 * time.Second, Concurrency: 1 << 18,
		Handler: func(ctx *fasthttp.RequestCtx) {
			req := &ctx.Request
			req.Header.Del("Connection")
			req.SetHost(hc.Addr)
			if ctx.IsTLS() { // the upstream hop is plain HTTP
				req.URI().SetScheme("http")
			}
			if headers {
				req.Header.Del(wire.HeaderAPIKey)
				for _, h := range contractHeaders.req {
					req.Header.SetCanonical(h[0], h[1])
				}
			}
			if err := hc.Do(req, &ctx.Response); err != nil {
				ctx.ResetBody()
				ctx.SetStatusCode(fasthttp.StatusBadGateway)
				return
			}
			ctx.Response.Header.Del("Connection")
			if headers {
				for _, h := range contractHeaders.resp {
					ctx.Response.Header.SetCanonical(h[0], h[1])
				}
			}
		}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := ln.Addr().String()
	if cfg != nil {
		ln = tls.NewListener(ln, cfg)
	}
	go func() { _ = srv.Serve(ln) }()
	tb.Cleanup(func() { _ = srv.Shutdown() })
	return addr
}

// BenchmarkServedSerial is a proxied read through the public listener as a
// client on loopback sends it (the gateway's Serve with its connection
// wrappers and server settings, log level warn) beside the load
// benchmark's bare proxy, one request at a time over one connection;
// "direct" is the client and the backend alone, whose count subtracted
// from the others leaves the proxy's own (about: the backend and the
// client parse the gateway's added headers too).
//
// "bare-headers" is the bare proxy writing the headers the gateway's
// answer and backend call carry (contractHeaders): the floor the
// contract's headers set under any proxy here.
//
// The other sub-benchmarks are the cost report's rows (bench/costreport,
// docs/cost.md), each built only when it is run: "-many" sends 10,000
// keys round robin, each its own vendor (each resolved once before the
// timer, the key cache's TTL an hour so that no refresh falls in a run
// however slow), "gateway-redis" limits on a private redis-server with
// the shipped leases and reports the script calls and commands per
// request from Redis' INFO commandstats.
func BenchmarkServedSerial(b *testing.B) {
	be := newTestBackend(b)
	gw := startGateway(b, be, func(o *Options) {
		o.Config.Limits.Vendor.Reads = config.Limit{Rate: 1 << 30, Period: time.Second}
		o.Logger = slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	key, _ := be.addKey("vendor-bench", wire.VendorApproved, time.Now().Add(time.Hour))
	one := func(addr string) func(testing.TB) servedRow {
		return func(testing.TB) servedRow { return servedRow{addr: addr, keys: []string{key}} }
	}
	var many []string // the 10,000 vendors' keys, made once
	manyKeys := func() []string {
		if many == nil {
			many = make([]string, 10000)
			for i := range many {
				many[i], _ = be.addKey("vendor-"+strconv.Itoa(i), wire.VendorApproved, time.Now().Add(time.Hour))
			}
		}
		return many
	}
	rows := []struct {
		name  string
		start func(testing.TB) servedRow
	}{
		{"gateway", one(strings.TrimPrefix(gw.url, "http://"))},
		{"bare", one(loadBareServer(b, be.addr))},
		{"bare-headers", func(tb testing.TB) servedRow { return one(startBareServer(tb, be.addr, nil, true))(tb) }},
		{"direct", one(be.addr)}, // the client and the backend alone, to subtract
		{"gateway-many", func(tb testing.TB) servedRow { return startServedRow(tb, be, false, manyKeys()) }},
		{"bare-many", func(tb testing.TB) servedRow { return servedRow{addr: loadBareServer(tb, be.addr), keys: manyKeys()} }},
		{"gateway-redis", func(tb testing.TB) servedRow { return startServedRow(tb, be, true, []string{key}) }},
		{"gateway-redis-many", func(tb testing.TB) servedRow { return startServedRow(tb, be, true, manyKeys()) }},
	}
	for _, r := range rows {
		var row *servedRow // started at the sub-benchmark's first run, kept for the next
		b.Run(r.name, func(b *testing.B) {
			if row == nil {
				row = new(servedRow)
				*row = r.start(b)
			}
			row.run(b)
		})
	}
}

// servedRow is one row of BenchmarkServedSerial: where its requests go,
// the keys sent round robin and, on Redis, the server to ask for calls.
type servedRow struct {
	addr  string
	keys  []string
	redis *testredis.Server
}

// startServedRow starts a gateway for keys (each sent once, so that every
// one is resolved and cached before the timer), in process or on a
// private redis-server with the shipped lease settings.
func startServedRow(tb testing.TB, be *testBackend, onRedis bool, keys []string) servedRow {
	var rs *testredis.Server
	if onRedis {
		rs = benchRedis(tb)
	}
	gw := startGateway(tb, be, func(o *Options) {
		o.Config.Limits.Vendor.Reads = config.Limit{Rate: 1 << 30, Period: time.Second}
		if rs != nil { // the load benchmark's limit: a lease needs a token to take at least a microsecond
			o.Config.Limits.Vendor.Reads = config.Limit{Rate: 100_000_000, Period: time.Minute}
		}
		o.Config.KeyCache.Size, o.Config.KeyCache.TTL = 100000, time.Hour
		o.Logger = slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))
		if rs != nil {
			o.Config.Redis.URL = config.List{rs.URL()}
			// valgrind runs the process tens of times slower: no reply may
			// be late enough to count as a failure (which drops the leases)
			o.Config.Redis.Timeout, o.Config.Redis.WireTimeout, o.Config.Redis.BusyTimeout = 5*time.Second, 10*time.Second, 10*time.Second
		}
	})
	// With Redis the key cache drops what it holds when the invalidations
	// first reach it (auth.Subscriber): wait for that before caching the
	// keys, or under valgrind the drop may fall in the measured loop and
	// every key be looked up again there.
	for deadline := time.Now().Add(time.Minute); rs != nil && !gw.g.auth.Cache().Pushed(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			tb.Fatal("the key invalidations never reached the key cache")
		}
	}
	row := servedRow{addr: strings.TrimPrefix(gw.url, "http://"), keys: keys, redis: rs}
	c := &fasthttp.HostClient{Addr: row.addr, MaxConns: 1}
	var req fasthttp.Request
	var resp fasthttp.Response
	for _, k := range keys {
		// Under valgrind on a busy machine a first lookup or Redis call may
		// be slow enough to fail (a breaker opens): the warm-up tries again.
		err := row.send(c, &req, &resp, k)
		for try := 0; err != nil && try < 50; try++ {
			time.Sleep(200 * time.Millisecond)
			err = row.send(c, &req, &resp, k)
		}
		if err != nil {
			tb.Fatal(err)
		}
	}
	return row
}

// benchRedis is a redis-server for a row on Redis: the one on the port
// VENDORGATE_BENCH_REDIS_PORT names, started for the run by the cost
// report (under valgrind, the benchmark's process cannot start one: the
// child's start and its signals stop callgrind), or a private one.
func benchRedis(tb testing.TB) *testredis.Server {
	p := os.Getenv("VENDORGATE_BENCH_REDIS_PORT")
	if p == "" {
		return testredis.Start(tb)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		tb.Fatalf("VENDORGATE_BENCH_REDIS_PORT %q: %v", p, err)
	}
	return &testredis.Server{Port: port}
}

// send is one read with key, which must answer the backend's 200.
func (r *servedRow) send(c *fasthttp.HostClient, req *fasthttp.Request, resp *fasthttp.Response, key string) error {
	req.Reset()
	req.SetRequestURI("http://gw/api/vendor/v1/orders/fast")
	req.Header.Set(wire.HeaderAPIKey, key)
	if err := c.Do(req, resp); err != nil || resp.StatusCode() != 200 {
		return fmt.Errorf("%v %d %s", err, resp.StatusCode(), resp.Body())
	}
	return nil
}

// run sends b.N reads over one connection, the keys round robin; on Redis
// it reports the script calls (EVALSHA, EVAL) and the commands Redis ran
// (those the scripts ran included) per request.
func (r *servedRow) run(b *testing.B) {
	c := &fasthttp.HostClient{Addr: r.addr, MaxConns: 1}
	var req fasthttp.Request
	var resp fasthttp.Response
	var before testredis.Info
	if r.redis != nil {
		before = r.redis.Info(b, "commandstats")
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := r.send(c, &req, &resp, r.keys[i]); err != nil {
			b.Fatal(err)
		}
		if i++; i == len(r.keys) {
			i = 0
		}
	}
	if r.redis != nil {
		after := r.redis.Info(b, "commandstats")
		var cmds int64
		for name, n := range after.Calls() {
			cmds += n - before.Calls()[name]
		}
		b.ReportMetric(float64(after.Scripts()-before.Scripts())/float64(b.N), "scripts/op")
		b.ReportMetric(float64(cmds)/float64(b.N), "rediscmds/op")
	}
}

// BenchmarkHandshakeSerial is a full TLS handshake (ECDSA P-256, the
// curve pinned to P-256, no session resumption) and one proxied read on
// the new connection, one at a time, through the gateway's HTTPS listener
// and through the load benchmark's bare proxy over TLS (crypto/tls's
// defaults but for the same pins, as bench/loadbench's). It reports the
// garbage collections per handshake, the whole process's.
func BenchmarkHandshakeSerial(b *testing.B) {
	be := newTestBackend(b)
	key, _ := be.addKey("vendor-bench", wire.VendorApproved, time.Now().Add(time.Hour))
	ca := testcert.NewCA(b)
	certFile, keyFile := ca.Issue(b, time.Now().Add(time.Hour), tlsName, "127.0.0.1").Write(b, b.TempDir(), "api")
	rows := []struct {
		name  string
		start func(testing.TB) string
	}{
		{"gateway", func(tb testing.TB) string {
			gw := startGateway(tb, be, func(o *Options) {
				o.Config.Limits.Vendor.Reads = config.Limit{Rate: 1 << 30, Period: time.Second}
				o.Config.TLS.CertFile, o.Config.TLS.KeyFile = certFile, keyFile
				o.Logger = slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))
			})
			return strings.TrimPrefix(gw.url, "http://")
		}},
		{"bare", func(tb testing.TB) string {
			kp, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				tb.Fatal(err)
			}
			return startBareServer(tb, be.addr, &tls.Config{Certificates: []tls.Certificate{kp}, MinVersion: tls.VersionTLS12,
				NextProtos: []string{"http/1.1"}, CurvePreferences: []tls.CurveID{tls.CurveP256}}, false)
		}},
	}
	for _, r := range rows {
		addr := ""
		b.Run(r.name, func(b *testing.B) {
			if addr == "" {
				addr = r.start(b)
			}
			cfg := ca.ClientConfig(tlsName)
			cfg.MinVersion, cfg.NextProtos = tls.VersionTLS12, []string{"http/1.1"}
			cfg.CurvePreferences, cfg.SessionTicketsDisabled = []tls.CurveID{tls.CurveP256}, true
			c := &fasthttp.HostClient{Addr: addr, MaxConns: 1, IsTLS: true, TLSConfig: cfg}
			var req fasthttp.Request
			var resp fasthttp.Response
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			gcs := ms.NumGC
			b.ReportAllocs()
			for b.Loop() {
				req.Reset()
				req.SetRequestURI("https://gw/api/vendor/v1/orders/fast")
				req.Header.Set(wire.HeaderAPIKey, key)
				req.SetConnectionClose() // the next read shakes hands again
				if err := c.Do(&req, &resp); err != nil || resp.StatusCode() != 200 {
					b.Fatalf("%v %d %s", err, resp.StatusCode(), resp.Body())
				}
			}
			runtime.ReadMemStats(&ms)
			b.ReportMetric(float64(ms.NumGC-gcs)/float64(b.N), "gc/op")
		})
	}
}

// BenchmarkStreamedSerial is BenchmarkProxiedSerial's gateway request to
// the report route (a streamed answer, drained as the server drains it).
func BenchmarkStreamedSerial(b *testing.B) {
	rig := newHandlerRig(b, func(o *Options) {
		o.Logger = slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	var req fasthttp.Request
	var ctx fasthttp.RequestCtx
	b.ReportAllocs()
	for b.Loop() {
		if err := rig.readPath(&req, &ctx, "/api/vendor/v1/orders/o1/reports/fast"); err != nil {
			b.Fatal(err)
		}
	}
}

// TestBareHeadersAsGateway holds the cost report's "bare-headers" row to
// the gateway's answer: the backend is sent the same headers, and the
// client answered the same ones, with values as long (the request id's
// aside: the gateway's grows with its count). A header the gateway adds
// or drops fails it until contractHeaders follows.
func TestBareHeadersAsGateway(t *testing.T) {
	be := newTestBackend(t)
	gw := startGateway(t, be, func(o *Options) {
		o.Config.Limits.Vendor.Reads = config.Limit{Rate: 1 << 30, Period: time.Second}
	})
	key, _ := be.addKey("vendor-bench", wire.VendorApproved, time.Now().Add(time.Hour))
	bare := startBareServer(t, be.addr, nil, true)
	// The headers of the answer to a read of path through addr, by name
	// and value length, and its body.
	read := func(addr, path string) (map[string]int, []byte) {
		t.Helper()
		c := &fasthttp.HostClient{Addr: addr}
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI("http://gw" + path)
		req.Header.Set(wire.HeaderAPIKey, key)
		if err := c.Do(req, resp); err != nil || resp.StatusCode() != 200 {
			t.Fatalf("%s%s: %v %d %s", addr, path, err, resp.StatusCode(), resp.Body())
		}
		answered := map[string]int{}
		for k, v := range resp.Header.All() {
			if string(k) != "Date" {
				answered[string(k)] = len(v)
			}
		}
		return answered, append([]byte(nil), resp.Body()...)
	}
	// What the backend was sent: its echo route answers the headers.
	sent := func(addr string) map[string]int {
		t.Helper()
		_, body := read(addr, "/api/vendor/v1/orders/echo")
		var echo map[string]string
		if err := json.Unmarshal(body, &echo); err != nil {
			t.Fatalf("%s: the echo: %v", addr, err)
		}
		out := map[string]int{}
		for k, v := range echo {
			if k != "method" && k != "body" && k != "Host" && k != "User-Agent" {
				out[k] = len(v)
			}
		}
		return out
	}
	gwAddr := strings.TrimPrefix(gw.url, "http://")
	gwSent, bareSent := sent(gwAddr), sent(bare)
	gwAnswered, _ := read(gwAddr, "/api/vendor/v1/orders/fast")
	bareAnswered, _ := read(bare, "/api/vendor/v1/orders/fast")
	for _, m := range []map[string]int{gwSent, bareSent, gwAnswered, bareAnswered} {
		delete(m, wire.HeaderRequestID)
	}
	if len(gwSent) < 5 || !maps.Equal(gwSent, bareSent) {
		t.Errorf("the backend was sent, by name and value length:\n gateway %v\n bare-headers %v", gwSent, bareSent)
	}
	if !maps.Equal(gwAnswered, bareAnswered) {
		t.Errorf("the client was answered, by name and value length:\n gateway %v\n bare-headers %v", gwAnswered, bareAnswered)
	}
}
