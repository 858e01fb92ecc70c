package gateway

import (
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"vendorgate/config"
	"vendorgate/shared/testredis"
	"vendorgate/shared/wire"
)

// benchHandler drives the whole handler (routing, auth from the cache,
// limiter, proxy to a real backend over loopback, answer) without a client
// socket, so that allocations are the gateway's own.
func benchHandler(b *testing.B, mod func(*Options)) {
	be := newTestBackend(b)
	gw := startGateway(b, be, func(o *Options) {
		o.Config.Limits.Vendor.Reads = config.Limit{Rate: 1 << 30, Period: time.Second}
		if mod != nil {
			mod(o)
		}
	})
	key, _ := be.addKey("vendor-bench", wire.VendorApproved, time.Now().Add(time.Hour))
	h := gw.g.Handler()
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var req fasthttp.Request
		var ctx fasthttp.RequestCtx
		for pb.Next() {
			req.Reset()
			req.Header.SetMethod("GET")
			req.SetRequestURI("/api/vendor/v1/orders/fast")
			req.Header.Set(wire.HeaderAPIKey, key)
			ctx.Init(&req, addr, nil)
			h(&ctx)
			if ctx.Response.StatusCode() != 200 {
				b.Fatalf("status %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
			}
			_ = ctx.Response.Body() // drains the stream as the server does when writing it
			ctx.Response.Reset()
		}
	})
}

func BenchmarkHandlerLocal(b *testing.B) {
	benchHandler(b, func(o *Options) { o.DisableAccessLog = true })
}

func BenchmarkHandlerLocalAccessLog(b *testing.B) {
	benchHandler(b, func(o *Options) { o.Logger = slog.New(slog.NewJSONHandler(io.Discard, nil)) })
}

// BenchmarkHandlerLocalWarnLevel is the shipped configuration: the access
// log on, the logger at warn (log_level: warn), so no line is written.
func BenchmarkHandlerLocalWarnLevel(b *testing.B) {
	benchHandler(b, func(o *Options) {
		o.Logger = slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
}

func BenchmarkHandlerRedis(b *testing.B) {
	rs := testredis.Start(b)
	benchHandler(b, func(o *Options) {
		o.DisableAccessLog = true
		o.Config.Redis.URL = config.List{rs.URL()}
	})
}
