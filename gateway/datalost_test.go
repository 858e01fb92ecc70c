package gateway

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"vendorgate/config"
	"vendorgate/gateway/window"
	"vendorgate/shared/testredis"
	"vendorgate/shared/wire"
)

// A Redis that loses its data mid-window (FLUSHALL) is counted in
// vendorgate_gateway_redis_data_lost_total and logged at ERROR, as
// docs/limits.md says; the requests go on, charged from zero.
func TestRedisDataLossCounted(t *testing.T) {
	rs := testredis.Start(t)
	b := newTestBackend(t)
	logs := &syncBuffer{}
	gw := startGateway(t, b, func(o *Options) {
		o.Logger = slog.New(slog.NewJSONHandler(logs, nil))
		o.Config.Redis.URL = config.List{rs.URL()}
		o.Config.Limits.Vendor.Orders = config.Limit{Rate: 100000, Period: time.Minute}
		o.Config.Limits.Policies = []config.Policy{{Name: "orders-month", Scope: config.ScopeVendor, Class: config.ClassOrders,
			Limit: config.Limit{Kind: config.KindQuota, Rate: 30, Window: config.WindowMonth}}}
	})
	key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	orders := gw.url + "/api/vendor/v1/orders"
	for i := 0; i < 3; i++ {
		if a := do(t, "POST", orders, key); a.status != 200 {
			t.Fatalf("order %d: %d", i, a.status)
		}
	}
	// The gateway's first charge wrote (or read) the marker.
	waitFor(t, "the data marker", func() bool { return strings.Trim(rs.Do(t, "EXISTS", window.MarkerKey), ":") == "1" })
	if n := metricValue(t, gw, "vendorgate_gateway_redis_data_lost_total"); n != 0 {
		t.Fatalf("%v data losses counted before any", n)
	}
	rs.Do(t, "FLUSHALL")
	if a := do(t, "POST", orders, key); a.status != 200 {
		t.Fatalf("the order after the flush: %d", a.status)
	}
	waitFor(t, "the loss counted", func() bool { return metricValue(t, gw, "vendorgate_gateway_redis_data_lost_total") == 1 })
	if l := logs.String(); !strings.Contains(l, `"level":"ERROR","msg":"redis lost its data`) {
		t.Fatalf("no ERROR line for the loss in:\n%s", l)
	}
}

// waitFor polls cond until it holds, failing the test after 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5 s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
