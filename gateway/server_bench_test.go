package gateway

import (
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"vendorgate/config"
	"vendorgate/shared/wire"
)

// BenchmarkServerProxied is a proxied request through the public listener
// (a client on loopback, the server's header parsing and its per-request
// HeaderReceived, the handler, the backend): what BenchmarkHandlerLocal
// leaves out. "read" is GET /orders/fast (an allocation-free backend
// answer); "order" is a POST of a 300-byte order, which the test backend
// echoes.
func BenchmarkServerProxied(b *testing.B) {
	for _, tc := range []struct{ name, method, path, body string }{
		{"read", "GET", "/api/vendor/v1/orders/fast", ""},
		{"order", "POST", "/api/vendor/v1/orders", `{"mc_number":"MC123","driver":{"first_name":"Ana","last_name":"` + strings.Repeat("x", 200) + `"},"services":["mvr"]}`},
	} {
		b.Run(tc.name, func(b *testing.B) {
			be := newTestBackend(b)
			gw := startGateway(b, be, func(o *Options) {
				o.Config.Limits.Vendor.Reads = config.Limit{Rate: 1 << 30, Period: time.Second}
				o.Config.Limits.Vendor.Orders = config.Limit{Rate: 1 << 30, Period: time.Second}
				o.DisableAccessLog = true
			})
			key, _ := be.addKey("vendor-bench", wire.VendorApproved, time.Now().Add(time.Hour))
			c := &fasthttp.HostClient{Addr: strings.TrimPrefix(gw.url, "http://"), MaxConns: 64}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
				defer fasthttp.ReleaseRequest(req)
				defer fasthttp.ReleaseResponse(resp)
				for pb.Next() {
					req.Reset()
					req.Header.SetMethod(tc.method)
					req.SetRequestURI("http://gw" + tc.path)
					req.Header.Set(wire.HeaderAPIKey, key)
					if tc.body != "" {
						req.Header.SetContentType("application/json")
						req.SetBodyString(tc.body)
					}
					if err := c.Do(req, resp); err != nil || resp.StatusCode() != 200 {
						b.Fatalf("%v %d %s", err, resp.StatusCode(), resp.Body())
					}
				}
			})
		})
	}
}

// BenchmarkHeaderReceived is the per-request cost of the body decision:
// a read (no MAC check), a POST with a signed key (the MAC checked), a
// POST without one.
func BenchmarkHeaderReceived(b *testing.B) {
	be := newTestBackend(b)
	gw := startGateway(b, be, nil)
	key, _ := be.addKey("vendor-bench", wire.VendorApproved, time.Now().Add(time.Hour))
	for _, tc := range []struct{ name, method, key string }{{"read", "GET", key}, {"order", "POST", key}, {"no-key", "POST", ""}} {
		b.Run(tc.name, func(b *testing.B) {
			var h fasthttp.RequestHeader
			h.SetMethod(tc.method)
			h.SetRequestURI("/api/vendor/v1/orders")
			if tc.key != "" {
				h.Set(wire.HeaderAPIKey, tc.key)
			}
			b.ReportAllocs()
			for b.Loop() {
				gw.g.bounds.headerReceived(&h)
			}
		})
	}
}
