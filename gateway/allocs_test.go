package gateway

import (
	"testing"

	"github.com/valyala/fasthttp"
)

// The allocation budgets of one proxied request through the whole handler
// (routing, key from the cache, local limiter, proxy to the backend,
// answer), the access log off, each as measured: a change that needs an
// allocation raises its budget as a choice. AllocsPerRun counts the whole
// process, so the test backend (a fasthttp server on loopback) is counted
// too, as it is in BenchmarkHandlerLocal's allocs/op.
const (
	// maxAllocsPerProxiedRequest: /orders/{order_id}. The one allocation
	// is the test harness's RequestCtx.Init (a server's connection does not
	// make one per request).
	maxAllocsPerProxiedRequest = 1
	// maxAllocsPerStreamedRequest: a report, streamed from the backend.
	// Four more are fasthttp's client streaming the answer's body (the
	// body stream and its three closures, per call).
	maxAllocsPerStreamedRequest = 5
)

// TestProxiedRequestAllocs guards the allocation budget of the request
// path, as BenchmarkHandlerLocal measures it, on the routes with a
// parameter (a router copies parameter values; the gateway's matcher does
// not): it fails as soon as a change makes a proxied request allocate more
// than its budget.
func TestProxiedRequestAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own: run without -race")
	}
	if testing.Short() {
		t.Skip("-short")
	}
	rig := newHandlerRig(t, func(o *Options) { o.DisableAccessLog = true })
	for _, tc := range []struct {
		name, path string
		budget     int
		headers    []string
	}{
		{"order", "/api/vendor/v1/orders/fast", maxAllocsPerProxiedRequest, nil},              // /orders/{order_id}
		{"report", "/api/vendor/v1/orders/o1/reports/fast", maxAllocsPerStreamedRequest, nil}, // /orders/{order_id}/reports/{service}
		// A client's own request id (scanned for a key), User-Agent and
		// trace context (an untrusted caller's: its sampled flag cleared,
		// its tracestate removed before the backend sees them).
		{"order with client headers", "/api/vendor/v1/orders/fast", maxAllocsPerProxiedRequest, []string{
			"X-Request-Id", "3f2504e0-4f89-11d3-9a0c-0305e82c3301",
			"User-Agent", "Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0",
			"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate", "vg=1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rig.headers = tc.headers
			var req fasthttp.Request
			var ctx fasthttp.RequestCtx
			// Warm up: the key cache, the limiter's bucket, the metric
			// children, the backend connection and the buffers pooled along
			// the way all exist before counting starts.
			for range 500 {
				if err := rig.readPath(&req, &ctx, tc.path); err != nil {
					t.Fatal(err)
				}
			}
			var failed error
			allocs := testing.AllocsPerRun(2000, func() {
				if err := rig.readPath(&req, &ctx, tc.path); err != nil && failed == nil {
					failed = err
				}
			})
			if failed != nil {
				t.Fatal(failed)
			}
			t.Logf("GET %s: %.2f allocations per proxied request (budget %d)", tc.path, allocs, tc.budget)
			if allocs > float64(tc.budget) {
				t.Fatalf("GET %s: %.2f allocations per proxied request; the budget is %d", tc.path, allocs, tc.budget)
			}
		})
	}
}
