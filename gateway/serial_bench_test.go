package gateway

import (
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"vendorgate/config"
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
	hc := &fasthttp.HostClient{Addr: backend, MaxConns: 1024, MaxIdemponentCallAttempts: 1, NoDefaultUserAgentHeader: true,
		ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second}
	srv := &fasthttp.Server{Name: "loadbench", NoDefaultServerHeader: true, IdleTimeout: 30 * time.Second, Concurrency: 1 << 18,
		Handler: func(ctx *fasthttp.RequestCtx) {
			req := &ctx.Request
			req.Header.Del("Connection")
			req.SetHost(hc.Addr)
			if err := hc.Do(req, &ctx.Response); err != nil {
				ctx.ResetBody()
				ctx.SetStatusCode(fasthttp.StatusBadGateway)
				return
			}
			ctx.Response.Header.Del("Connection")
		}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	tb.Cleanup(func() { _ = srv.Shutdown() })
	return ln.Addr().String()
}

// BenchmarkServedSerial is a proxied read through the public listener as a
// client on loopback sends it (the gateway's Serve with its connection
// wrappers and server settings, log level warn) beside the load
// benchmark's bare proxy, one request at a time over one connection;
// "direct" is the client and the backend alone, whose count subtracted
// from the others leaves the proxy's own (about: the backend and the
// client parse the gateway's added headers too).
func BenchmarkServedSerial(b *testing.B) {
	be := newTestBackend(b)
	gw := startGateway(b, be, func(o *Options) {
		o.Config.Limits.Vendor.Reads = config.Limit{Rate: 1 << 30, Period: time.Second}
		o.Logger = slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	key, _ := be.addKey("vendor-bench", wire.VendorApproved, time.Now().Add(time.Hour))
	for _, r := range []struct{ name, addr string }{
		{"gateway", strings.TrimPrefix(gw.url, "http://")},
		{"bare", loadBareServer(b, be.addr)},
		{"direct", be.addr}, // the client and the backend alone, to subtract
	} {
		b.Run(r.name, func(b *testing.B) {
			c := &fasthttp.HostClient{Addr: r.addr, MaxConns: 1}
			var req fasthttp.Request
			var resp fasthttp.Response
			b.ReportAllocs()
			for b.Loop() {
				req.Reset()
				req.SetRequestURI("http://gw/api/vendor/v1/orders/fast")
				req.Header.Set(wire.HeaderAPIKey, key)
				if err := c.Do(&req, &resp); err != nil || resp.StatusCode() != 200 {
					b.Fatalf("%v %d %s", err, resp.StatusCode(), resp.Body())
				}
			}
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
