package gateway

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"vendorgate/shared/wire"
)

// TestUsageFlushesWaitForTheBackend: a backend refusing the usage flushes
// makes the gateway keep them (pending flushes and bytes in /metrics, one
// a minute at most behind the one refused: not one a flush), and once it
// takes them again the queue empties and nothing stays pending.
func TestUsageFlushesWaitForTheBackend(t *testing.T) {
	b := newTestBackend(t)
	b.refuseUsage.Store(true)
	gw := startGateway(t, b, func(o *Options) { o.Config.Usage.FlushInterval = time.Second })
	var keys []string
	for i := range 3 {
		k, _ := b.addKey(fmt.Sprintf("vendor-%d", i), wire.VendorApproved, time.Now().Add(time.Hour))
		keys = append(keys, k)
	}
	errors := `vendorgate_gateway_usage_flushes_total{result="error"}`
	refused := func() float64 {
		for _, k := range keys {
			do(t, "GET", gw.url+"/api/vendor/v1/me", k)
		}
		// One scrape; the counter has no sample before the first refusal.
		var n float64
		for _, line := range strings.Split(scrape(t, gw), "\n") {
			if v, ok := strings.CutPrefix(line, errors+" "); ok {
				_, _ = fmt.Sscan(v, &n)
			}
		}
		return n
	}
	deadline := time.Now().Add(20 * time.Second)
	for n := 0.0; n < 4; n = refused() {
		if time.Now().After(deadline) {
			t.Fatalf("%v usage flushes refused in 20 s of flushes every second", n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Four flushes refused in at most two minutes: the one tried first and
	// at most one merged flush a minute behind it.
	if p := metricValue(t, gw, "vendorgate_gateway_usage_pending_flushes"); p < 1 || p > 3 {
		t.Fatalf("%v usage flushes pending after four refused", p)
	}
	if by := metricValue(t, gw, "vendorgate_gateway_usage_pending_bytes"); by <= 0 {
		t.Fatalf("pending usage flushes hold %v bytes", by)
	}
	b.refuseUsage.Store(false)
	for metricValue(t, gw, "vendorgate_gateway_usage_pending_flushes") != 0 {
		if time.Now().After(deadline.Add(10 * time.Second)) {
			t.Fatal("the usage flushes stayed pending after the backend took them again")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if b.usageFlushes.Load() == 0 || metricValue(t, gw, "vendorgate_gateway_usage_pending_bytes") != 0 || metricValue(t, gw, "vendorgate_gateway_usage_dropped_flushes_total") != 0 {
		t.Fatal("the backend took no flush, or the queue kept bytes, or dropped a flush")
	}
}
