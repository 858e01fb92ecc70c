package gateway

import (
	"testing"

	"github.com/valyala/fasthttp"
)

// maxAllocsPerProxiedRequest is the budget of one proxied request through
// the whole handler (routing, key from the cache, local limiter, proxy to
// the backend, answer), the access log off. Measured at 4; the budget
// leaves one so that a change that needs one allocation is a choice, and a
// second is caught. AllocsPerRun counts the whole process, so the test
// backend (a fasthttp server on loopback) is counted too, as it is in
// BenchmarkHandlerLocal's allocs/op.
const maxAllocsPerProxiedRequest = 5

// TestProxiedRequestAllocs guards the allocation budget of the request path,
// as BenchmarkHandlerLocal measures it: it fails as soon as a change makes
// a proxied request allocate more than the budget.
func TestProxiedRequestAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own: run without -race")
	}
	if testing.Short() {
		t.Skip("-short")
	}
	rig := newHandlerRig(t, func(o *Options) { o.DisableAccessLog = true })
	var req fasthttp.Request
	var ctx fasthttp.RequestCtx
	// Warm up: the key cache, the limiter's bucket, the metric children, the
	// backend connection and the buffers pooled along the way all exist
	// before counting starts.
	for range 500 {
		if err := rig.read(&req, &ctx); err != nil {
			t.Fatal(err)
		}
	}
	var failed error
	allocs := testing.AllocsPerRun(2000, func() {
		if err := rig.read(&req, &ctx); err != nil && failed == nil {
			failed = err
		}
	})
	if failed != nil {
		t.Fatal(failed)
	}
	t.Logf("%.2f allocations per proxied request (budget %d)", allocs, maxAllocsPerProxiedRequest)
	if allocs > maxAllocsPerProxiedRequest {
		t.Fatalf("%.2f allocations per proxied request; the budget is %d", allocs, maxAllocsPerProxiedRequest)
	}
}
