package backend

import (
	"testing"

	"github.com/valyala/fasthttp"

	"vendorgate/shared/apikey"
	"vendorgate/shared/wire"
)

// benchGet measures one GET over loopback with a fasthttp client, as the
// gateway calls the backend.
func benchGet(b *testing.B, url string, hdr map[string]string) {
	c := &fasthttp.Client{}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		for pb.Next() {
			req.SetRequestURI(url)
			for k, v := range hdr {
				req.Header.Set(k, v)
			}
			if err := c.Do(req, resp); err != nil || resp.StatusCode() >= 300 && resp.StatusCode() != 202 {
				b.Fatalf("%v %d %s", err, resp.StatusCode(), resp.Body())
			}
		}
	})
}

func BenchmarkKeyLookup(b *testing.B) {
	h := start(b)
	v := h.newVendor("sandbox", "mvr")
	var issued map[string]any
	h.decode(h.adminCall("POST", "/admin/v1/vendors/"+v+"/keys", ""), 201, &issued)
	benchGet(b, h.api+wire.KeyLookupPath+apikey.Hash(issued["key"].(string)),
		map[string]string{wire.HeaderInternalToken: testInternalToken})
}

func BenchmarkGetOrder(b *testing.B) {
	h := start(b)
	v := h.newVendor("sandbox", allServices...)
	o := h.mustPlace(v, "D1234567")
	benchGet(b, h.api+"/api/vendor/v1/orders/"+o.OrderID,
		map[string]string{wire.HeaderInternalToken: testInternalToken, wire.HeaderVendorID: v})
}

// BenchmarkReportDownload: one report download, its audit record included.
func BenchmarkReportDownload(b *testing.B) {
	h := start(b)
	v := h.newVendor("live", "mvr")
	o := h.mustPlace(v, "D1234567", "mvr")
	if r := h.adminCall("POST", "/admin/v1/orders/"+o.OrderID+"/complete", `{"service":"mvr"}`); r.status != 200 {
		b.Fatalf("complete mvr: %d %s", r.status, r.body)
	}
	benchGet(b, h.api+"/api/vendor/v1/orders/"+o.OrderID+"/reports/mvr",
		map[string]string{wire.HeaderInternalToken: testInternalToken, wire.HeaderVendorID: v})
}
