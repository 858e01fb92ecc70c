package gateway

import (
	"strings"
	"sync"
	"testing"
	"time"

	"vendorgate/config"
	"vendorgate/shared/apierr"
	"vendorgate/shared/wire"
)

// A burst that fills the gateway's own pool to a backend is the gateway's
// overload, not the backend failing: the burst's extra requests answer
// 503, but the breaker stays closed and the next request is served.
func TestFullPoolLeavesBreakerClosed(t *testing.T) {
	b := newTestBackend(t)
	gw := startGateway(t, b, func(o *Options) {
		o.Config.Proxy.MaxConns = 1
		o.Config.Proxy.BreakerFailures = 3
		o.Config.Proxy.BreakerOpenFor = 10 * time.Second // an opened breaker would still be open at the end
		o.Config.Limits.Vendor.Reads = config.Limit{Rate: 1000, Period: time.Minute}
	})
	key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	if a := do(t, "GET", gw.url+"/api/vendor/v1/me", key); a.status != 200 { // caches the key
		t.Fatalf("%d %s", a.status, a.body)
	}
	b.delay.Store(int64(400 * time.Millisecond)) // longer than the 100ms wait for a free connection
	const burst = 12
	answers := make([]answer, burst)
	var wg sync.WaitGroup
	for i := range burst {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = do(t, "GET", gw.url+"/api/vendor/v1/orders/slow", key)
		}()
	}
	wg.Wait()
	full := 0
	for _, a := range answers {
		switch {
		case a.status == 200:
		case a.status == 503 && a.isEnv && a.env.Code == apierr.RequestFailed:
			full++
		default:
			t.Errorf("burst answer %d %s", a.status, a.body)
		}
	}
	if full < 3 {
		t.Fatalf("only %d of %d requests found the pool full: the test did not exhaust it", full, burst)
	}
	m := scrape(t, gw)
	if strings.Contains(m, `to="open"`) || !strings.Contains(m, `vendorgate_gateway_breaker_state{breaker="backend:`+b.addr+`"} 0`) {
		t.Errorf("a full pool moved the backend breaker:\n%s", grep(m, "breaker_"))
	}
	b.delay.Store(0)
	if a := do(t, "GET", gw.url+"/api/vendor/v1/orders/slow", key); a.status != 200 {
		t.Errorf("the request after the burst: %d %s", a.status, a.body)
	}
}
