package gateway

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"vendorgate/config"
	"vendorgate/gateway/policy"
	"vendorgate/shared/testbuild"
	"vendorgate/shared/wire"
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
	if testbuild.Race {
		t.Skip("the race detector allocates on its own: run without -race")
	}
	if testing.Short() {
		t.Skip("-short")
	}
	rig := newHandlerRig(t, func(o *Options) { o.DisableAccessLog = true })
	// The rig's key expires in an hour, within key_expiry_warning: every
	// answer carries X-API-Key-Expiration. far's window is shorter than
	// that: its answers carry none.
	far := newHandlerRig(t, func(o *Options) { o.DisableAccessLog = true; o.Config.KeyExpiryWarning = 30 * time.Minute })
	for _, tc := range []struct {
		name, path string
		budget     int
		headers    []string
		rig        *handlerRig
	}{
		{"order", "/api/vendor/v1/orders/fast", maxAllocsPerProxiedRequest, nil, nil}, // /orders/{order_id}
		{"order, key outside its expiry warning", "/api/vendor/v1/orders/fast", maxAllocsPerProxiedRequest, nil, far},
		{"report", "/api/vendor/v1/orders/o1/reports/fast", maxAllocsPerStreamedRequest, nil, nil}, // /orders/{order_id}/reports/{service}
		// A client's own request id (scanned for a key), User-Agent and
		// trace context (an untrusted caller's: its sampled flag cleared,
		// its tracestate removed before the backend sees them).
		{"order with client headers", "/api/vendor/v1/orders/fast", maxAllocsPerProxiedRequest, []string{
			"X-Request-Id", "3f2504e0-4f89-11d3-9a0c-0305e82c3301",
			"User-Agent", "Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0",
			"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate", "vg=1"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rig := rig
			if tc.rig != nil {
				rig = tc.rig
			}
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

// TestFullTableAllocs: a table of MaxPolicies rows (the four built-in and
// twelve added, of class reports) and a report route subject to MaxChecks
// limits (reads, the twelve, three shadow twins) cost a request no
// allocation more than the default table does.
func TestFullTableAllocs(t *testing.T) {
	if testbuild.Race {
		t.Skip("the race detector allocates on its own: run without -race")
	}
	if testing.Short() {
		t.Skip("-short")
	}
	rig := newHandlerRig(t, func(o *Options) {
		o.DisableAccessLog = true
		for i := range policy.MaxPolicies - 4 {
			p := config.Policy{Name: "p" + strconv.Itoa(i), Scope: config.ScopeVendor, Class: "reports",
				Limit: config.Limit{Rate: 1 << 30, Period: time.Minute}}
			if i < policy.MaxChecks-1-(policy.MaxPolicies-4) {
				p.ShadowTwin = &config.Limit{Rate: 1 << 30, Period: time.Minute}
			}
			o.Config.Limits.Policies = append(o.Config.Limits.Policies, p)
		}
	})
	var req fasthttp.Request
	var ctx fasthttp.RequestCtx
	const path = "/api/vendor/v1/orders/o1/reports/fast"
	for range 500 {
		if err := rig.readPath(&req, &ctx, path); err != nil {
			t.Fatal(err)
		}
	}
	// reads and the twelve, each enforced (the twins are shadow).
	req.Reset()
	req.Header.SetMethod("GET")
	req.SetRequestURI(path)
	req.Header.Set(wire.HeaderAPIKey, rig.key)
	ctx.Init(&req, rig.peer, nil)
	rig.h(&ctx)
	_ = ctx.Response.Body()
	if got := strings.Count(string(ctx.Response.Header.Peek("RateLimit-Policy")), ";q="); got != 1+policy.MaxPolicies-4 {
		t.Fatalf("RateLimit-Policy of the report names %d policies, want %d", got, 1+policy.MaxPolicies-4)
	}
	var failed error
	allocs := testing.AllocsPerRun(2000, func() {
		if err := rig.readPath(&req, &ctx, path); err != nil && failed == nil {
			failed = err
		}
	})
	if failed != nil {
		t.Fatal(failed)
	}
	t.Logf("GET %s under %d checks: %.2f allocations per request (budget %d)", path, policy.MaxChecks, allocs, maxAllocsPerStreamedRequest)
	if allocs > float64(maxAllocsPerStreamedRequest) {
		t.Fatalf("%.2f allocations per request under a full table; the budget is %d", allocs, maxAllocsPerStreamedRequest)
	}
}
