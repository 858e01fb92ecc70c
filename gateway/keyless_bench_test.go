package gateway

import (
	"net"
	"sync/atomic"
	"testing"

	"github.com/valyala/fasthttp"

	"vendorgate/config"
	"vendorgate/shared/testredis"
)

// BenchmarkHandlerRedisKeyless is a keyless read through the handler with
// the failed-key throttle in Redis, each from an address of its own (all
// under failed_keys.per_address, so each is counted): the cost of a
// refused request that reaches the throttle.
func BenchmarkHandlerRedisKeyless(b *testing.B) {
	rs := testredis.Start(b)
	rig := newHandlerRig(b, func(o *Options) {
		o.DisableAccessLog = true
		o.Config.Redis.URL = config.List{rs.URL()}
	})
	var seq atomic.Uint32
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var req fasthttp.Request
		var ctx fasthttp.RequestCtx
		peer := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 0).To4(), Port: 40000}
		for pb.Next() {
			n := seq.Add(1)
			peer.IP[1], peer.IP[2], peer.IP[3] = byte(n>>16), byte(n>>8), byte(n)
			req.Reset()
			req.Header.SetMethod("GET")
			req.SetRequestURI("/api/vendor/v1/orders/fast")
			ctx.Init(&req, peer, nil)
			rig.h(&ctx)
			if st := ctx.Response.StatusCode(); st != 401 {
				b.Fatalf("status %d %s", st, ctx.Response.Body())
			}
			ctx.Response.Reset()
		}
	})
}
