package gateway

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"vendorgate/config"
	"vendorgate/gateway/limit"
	"vendorgate/gateway/proxy"
	"vendorgate/shared/apierr"
	"vendorgate/shared/testredis"
	"vendorgate/shared/wire"
)

// downloadsLeft is the report-downloads entry's remaining in an answer's
// RateLimit field, in tokens.
func downloadsLeft(t *testing.T, a answer) int {
	t.Helper()
	m := regexp.MustCompile(`"report-downloads";r=(\d+);`).FindStringSubmatch(a.header.Get("RateLimit"))
	if m == nil {
		t.Fatalf("no report-downloads entry in RateLimit %q", a.header.Get("RateLimit"))
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// refundPolicy: report downloads at 5 tokens each out of 100 a minute
// (20 downloads), refunded when the backend fails them: at most 10 tokens
// (two downloads) a minute per vendor at each gateway.
func refundPolicy(o *Options) {
	o.Config.Limits.Vendor.Reads = config.Limit{Rate: 100, Period: time.Minute}
	o.Config.Limits.Policies = []config.Policy{{Name: "report-downloads", Scope: config.ScopeVendor, Class: "reports",
		Limit: config.Limit{Rate: 100, Period: time.Minute}, Cost: 5, RefundFailures: true}}
}

// A download the backend answers 500 costs the vendor nothing, up to the
// cap; one the gateway answers 503 itself (the backend refused the
// connection) stays charged. The headers count tokens: q=100, and each
// download takes 5. In process and in Redis.
func TestRefundOnBackendFailure(t *testing.T) {
	limiterModes(t, func(t *testing.T, withRedis func(*Options)) {
		b := newTestBackend(t)
		// Without leases, so that every header is Redis' own count (with
		// them, r counts this gateway's lease as of its last grant):
		// TestRefundAcrossGateways runs the shipped lease settings.
		gw := startGateway(t, b, func(o *Options) { withRedis(o); refundPolicy(o); o.Config.Redis.LeaseMax = 1 })
		key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
		report := gw.url + "/api/vendor/v1/orders/o1/reports/mvr"
		failing := func(ctx *fasthttp.RequestCtx) {
			ctx.SetStatusCode(500)
			ctx.SetBody(apierr.New(apierr.InternalError, "the report store is down").Body())
		}
		ok := func(ctx *fasthttp.RequestCtx) {
			ctx.SetContentType("application/pdf")
			ctx.SetBodyString("%PDF")
		}
		settle := func() {
			if gw.g.stores.Redis != nil {
				// A refund of a token charged alone goes with the lease
				// loop's next refunds (every quarter lease_ttl).
				time.Sleep(gw.cfg.Redis.LeaseTTL/4 + 300*time.Millisecond)
			}
		}

		b.setReport(failing)
		for i := 0; i < 2; i++ {
			a := do(t, "GET", report, key)
			a.wantError(t, 500, apierr.InternalError)
			if p := a.header.Get("RateLimit-Policy"); p != `"reads";q=100;w=60, "report-downloads";q=100;w=60` {
				t.Fatalf("RateLimit-Policy %q", p)
			}
		}
		settle()
		b.setReport(ok)
		a := do(t, "GET", report, key)
		if a.status != 200 {
			t.Fatalf("download: %d %s", a.status, a.body)
		}
		if left := downloadsLeft(t, a); left != 95 {
			t.Fatalf("after two failed downloads refunded and one served, %d tokens left, want 95", left)
		}

		// Past the cap (two downloads a minute) a failed download stays
		// charged: a retry storm does not lift the limit.
		b.setReport(failing)
		do(t, "GET", report, key).wantError(t, 500, apierr.InternalError)
		settle()
		b.setReport(ok)
		a = do(t, "GET", report, key)
		if left := downloadsLeft(t, a); left > 95-10+3 || left < 95-10 {
			t.Fatalf("after a failed download past the cap and one served, %d tokens left, want 85 plus what refilled", left)
		}

		// The gateway's own 503 (the backend refused the connection) is
		// not the backend's answer: charged. 100 a minute refills 5
		// tokens in 3 s.
		before := downloadsLeft(t, a)
		b.stop()
		do(t, "GET", report, key).wantError(t, 503, apierr.RequestFailed)
		b.restart()
		settle()
		a = do(t, "GET", report, key)
		if a.status != 200 {
			t.Fatalf("download after the backend came back: %d %s", a.status, a.body)
		}
		if left := downloadsLeft(t, a); left > before-10+3 {
			t.Fatalf("a 503 of the gateway's own was refunded: %d tokens left, was %d before two downloads", left, before)
		}
		m := string(do(t, "GET", gw.admin+"/metrics", "").body)
		for _, want := range []string{`vendorgate_gateway_limiter_refunds_total{outcome="given_back"} 2`, `vendorgate_gateway_limiter_refunds_total{outcome="kept"} 1`} {
			if !strings.Contains(m, want) {
				t.Errorf("metrics lack %s", want)
			}
		}
	})
}

// Across two gateways on one Redis with the shipped lease settings: the
// downloads one gateway failed for the backend come back to the vendor at
// the other.
func TestRefundAcrossGateways(t *testing.T) { refundTwoFailedDownloads(t, 0) }

// Two downloads in a row that the backend fails slowly, at one gateway:
// the first one's refund goes to Redis alone (the lease loop sends queued
// refunds every quarter lease_ttl) while the second's charge is still
// open, its request not yet failed. The first refund lowers the bucket's
// TAT below the second charge's; the second refund must come back all the
// same: both downloads given back, the other gateway sees the whole bucket.
func TestRefundAcrossGatewaysWhileALaterChargeIsOpen(t *testing.T) {
	// Slower than a quarter lease_ttl: the lease loop sends the first
	// refund before the second download fails.
	refundTwoFailedDownloads(t, config.DefaultGateway().Redis.LeaseTTL/4+300*time.Millisecond)
}

// refundTwoFailedDownloads fails two downloads in a row at one of two
// gateways on one Redis (the backend answers 502 after slow), and wants
// both given back as the other gateway sees the bucket.
func refundTwoFailedDownloads(t *testing.T, slow time.Duration) {
	rs := testredis.Start(t)
	b := newTestBackend(t)
	opts := func(o *Options) {
		refundPolicy(o)
		o.Config.Redis.URL = config.List{rs.URL()}
	}
	g1, g2 := startGateway(t, b, opts), startGateway(t, b, opts)
	if g1.cfg.Redis.LeaseMax != config.DefaultGateway().Redis.LeaseMax || g1.cfg.Redis.LeaseTTL != config.DefaultGateway().Redis.LeaseTTL {
		t.Fatal("not the shipped lease settings")
	}
	key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	report := "/api/vendor/v1/orders/o1/reports/mvr"
	b.setReport(func(ctx *fasthttp.RequestCtx) {
		time.Sleep(slow)
		ctx.SetStatusCode(502)
		ctx.SetBodyString("<html>bad gateway</html>")
	})
	for i := 0; i < 2; i++ {
		do(t, "GET", g1.url+report, key).wantError(t, 502, apierr.RequestFailed)
	}
	time.Sleep(g1.cfg.Redis.LeaseTTL/4 + 300*time.Millisecond)
	b.setReport(nil)
	a := do(t, "GET", g2.url+report, key)
	if a.status != 200 {
		t.Fatalf("download at the other gateway: %d", a.status)
	}
	if left := downloadsLeft(t, a); left != 95 {
		t.Fatalf("the other gateway sees %d tokens left, want 95: the two failed downloads given back", left)
	}
	m := string(do(t, "GET", g1.admin+"/metrics", "").body)
	if want := `vendorgate_gateway_limiter_refunds_total{outcome="given_back"} 2`; !strings.Contains(m, want) {
		t.Errorf("metrics lack %s", want)
	}
}

// What counts as the gateway failing a request for the backend.
func TestFailedForBackend(t *testing.T) {
	for _, tc := range []struct {
		status int
		err    error
		want   bool
	}{
		{200, nil, false},
		{404, nil, false},
		{500, nil, true},
		{503, nil, true}, // the backend's own 503
		{502, &apierr.Error{Code: apierr.RequestFailed, HTTPStatus: 502}, true},
		{200, fmt.Errorf("%w: b0: timeout", proxy.ErrTimeout), true},
		{200, fmt.Errorf("%w: b0: refused", proxy.ErrUnavailable), false},
		{200, fmt.Errorf("%w: redis", limit.ErrUnavailable), false},
		{200, limit.ErrBusy, false},
	} {
		var ctx fasthttp.RequestCtx
		ctx.Response.SetStatusCode(tc.status)
		if got := failedForBackend(&ctx, tc.err); got != tc.want {
			t.Errorf("status %d, err %v: %v, want %v", tc.status, tc.err, got, tc.want)
		}
	}
}
