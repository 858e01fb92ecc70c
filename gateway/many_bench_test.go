package gateway

import (
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"vendorgate/config"
	"vendorgate/shared/wire"
)

// BenchmarkHandlerLocalManyVendors is BenchmarkHandlerLocal with 10,000
// keys sent round robin, each its own vendor: what a gateway in front of
// many vendors does per request (each key cached before the timer starts).
func BenchmarkHandlerLocalManyVendors(b *testing.B) {
	be := newTestBackend(b)
	gw := startGateway(b, be, func(o *Options) {
		o.Config.Limits.Vendor.Reads = config.Limit{Rate: 1 << 30, Period: time.Second}
		o.Config.KeyCache.Size = 100000 // the default; the test harness keeps 1,000
		o.DisableAccessLog = true
	})
	keys := make([]string, 10000)
	for i := range keys {
		keys[i], _ = be.addKey("vendor-"+strconv.Itoa(i), wire.VendorApproved, time.Now().Add(time.Hour))
	}
	h := gw.g.Handler()
	peer := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}
	send := func(req *fasthttp.Request, ctx *fasthttp.RequestCtx, key string) {
		req.Reset()
		req.Header.SetMethod("GET")
		req.SetRequestURI("/api/vendor/v1/orders/fast")
		req.Header.Set(wire.HeaderAPIKey, key)
		ctx.Init(req, peer, nil)
		h(ctx)
		if ctx.Response.StatusCode() != 200 {
			b.Fatalf("status %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
		}
		_ = ctx.Response.Body()
		ctx.Response.Reset()
	}
	var req fasthttp.Request
	var ctx fasthttp.RequestCtx
	for _, k := range keys {
		send(&req, &ctx, k)
	}
	var next atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var req fasthttp.Request
		var ctx fasthttp.RequestCtx
		for pb.Next() {
			send(&req, &ctx, keys[next.Add(1)%uint64(len(keys))])
		}
	})
}

// BenchmarkVendorsSerial sends BenchmarkHandlerLocalManyVendors' request
// one at a time, from one goroutine, with one key ("1") or 10,000 sent
// round robin, each its own vendor ("10000"): under callgrind
// (docs/bench.md, "Many vendors"), the instructions and cache misses a
// request costs per vendor count, the difference between two run lengths.
// The work that follows wall time and not requests is kept out of the
// count as far as settings allow (the keys' background refreshes an hour
// away, the usage flush a minute), as callgrind runs the requests some
// fifty times slower than the clock that drives it.
func BenchmarkVendorsSerial(b *testing.B) {
	for _, n := range []int{1, 10000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			be := newTestBackend(b)
			gw := startGateway(b, be, func(o *Options) {
				o.Config.Limits.Vendor.Reads = config.Limit{Rate: 1 << 30, Period: time.Second}
				o.Config.KeyCache.Size = 100000
				o.Config.KeyCache.TTL, o.Config.KeyCache.PushedTTL = time.Hour, time.Hour
				o.Config.Usage.FlushInterval = time.Minute // the longest
				o.DisableAccessLog = true
			})
			keys := make([]string, n)
			for i := range keys {
				keys[i], _ = be.addKey("vendor-"+strconv.Itoa(i), wire.VendorApproved, time.Now().Add(time.Hour))
			}
			send := readAs(b, gw.g.Handler())
			for _, k := range keys {
				send(k)
			}
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				send(keys[i])
				if i++; i == n {
					i = 0
				}
			}
		})
	}
}

// readAs is a read of /orders/fast through h with a key, wanting 200: one
// request kept and reused, its answer reset after it.
func readAs(b testing.TB, h fasthttp.RequestHandler) func(key string) {
	peer := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}
	var req fasthttp.Request
	var ctx fasthttp.RequestCtx
	return func(key string) {
		req.Reset()
		req.Header.SetMethod("GET")
		req.SetRequestURI("/api/vendor/v1/orders/fast")
		req.Header.Set(wire.HeaderAPIKey, key)
		ctx.Init(&req, peer, nil)
		h(&ctx)
		if ctx.Response.StatusCode() != 200 {
			b.Fatalf("status %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
		}
		_ = ctx.Response.Body()
		ctx.Response.Reset()
	}
}
