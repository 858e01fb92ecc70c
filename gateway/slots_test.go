package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"vendorgate/config"
	"vendorgate/gateway/concurrency"
	"vendorgate/gateway/usage"
	"vendorgate/shared/apierr"
	"vendorgate/shared/testredis"
	"vendorgate/shared/wire"
)

// downloadsAtOnce is a policy of kind concurrency: n report downloads of
// one vendor in flight at once, over every gateway.
func downloadsAtOnce(n int) config.Policy {
	return config.Policy{Name: "downloads-at-once", Scope: config.ScopeVendor, Class: "reports",
		Limit: config.Limit{Kind: config.KindConcurrency, Rate: n}}
}

// TestConcurrencyPolicy: two report downloads of a vendor at once, over
// two gateways on one Redis (one gateway in process): the third is
// refused with 429 rate_limited and Retry-After while two are held, on
// either gateway, and admitted once one of the held streams ends; the
// policy is in neither RateLimit header; a read is not a report and is
// never refused by it; another vendor has its own slots.
func TestConcurrencyPolicy(t *testing.T) {
	limiterModes(t, func(t *testing.T, withRedis func(*Options)) {
		b := newTestBackend(t)
		bigReport(b, 16<<20)
		start := func() *testGateway {
			return startGateway(t, b, func(o *Options) {
				withRedis(o)
				o.Config.AdminToken = "usage-admin-token-0123"
				o.Config.Limits.Vendor.Reads = config.Limit{Rate: 10000, Period: time.Minute} // the polling below reads
				o.Config.Limits.Policies = []config.Policy{downloadsAtOnce(2)}
			})
		}
		gws := []*testGateway{start()}
		if gws[0].g.stores.Redis != nil {
			gws = append(gws, start())
		}
		other := gws[len(gws)-1]
		key, res := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
		keyB, _ := b.addKey("vendor-b", wire.VendorApproved, time.Now().Add(time.Hour))
		report := "/api/vendor/v1/orders/o1/reports/mvr"

		h1 := holdDownload(t, gws[0].url+report, key)
		h2 := holdDownload(t, other.url+report, key)
		if h1.status != 200 || h2.status != 200 {
			t.Fatalf("two held downloads: %d %d", h1.status, h2.status)
		}
		held := 0
		for _, gw := range gws {
			held += gw.g.stores.Slots.Held()
		}
		if held != 2 {
			t.Fatalf("%d requests hold slots over the gateways, want 2", held)
		}
		if m := scrape(t, gws[0]); !strings.Contains(m, "vendorgate_gateway_concurrency_slots_held ") {
			t.Fatal("no vendorgate_gateway_concurrency_slots_held in the metrics")
		}
		for _, gw := range gws {
			h := holdDownload(t, gw.url+report, key)
			h.conn.Close()
			h.wantRefused(t)
			if !strings.Contains(string(h.body), "in flight at once") {
				t.Fatalf("refusal %s", h.body)
			}
			for _, f := range []string{"RateLimit-Policy", "RateLimit"} {
				if v := h.header.Get(f); strings.Contains(v, "downloads-at-once") {
					t.Fatalf("%s %q names the concurrency policy", f, v)
				}
			}
		}
		if a := do(t, "GET", other.url+"/api/vendor/v1/me", key); a.status != 200 {
			t.Fatalf("a read with two downloads held: %d %s", a.status, a.body)
		}
		page := do(t, "GET", other.url+"/docs", "")
		if !strings.Contains(string(page.body), "<code>downloads-at-once</code> at most 2 in flight at once") ||
			!strings.Contains(string(page.body), "not in the <code>RateLimit</code> headers") {
			t.Fatalf("the docs page does not say what downloads-at-once admits")
		}
		if h := holdDownload(t, other.url+report, keyB); h.status != 200 {
			t.Fatalf("another vendor's download: %d %s", h.status, h.body)
		} else {
			h.conn.Close()
		}
		// One held stream ends: its slot frees when the gateway sees the
		// end, and the next download is admitted on the other gateway.
		h1.conn.Close()
		deadline := time.Now().Add(10 * time.Second)
		for {
			h := holdDownload(t, other.url+report, key)
			h.conn.Close()
			if h.status == 200 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the slot of the ended stream never came back: %d %s", h.status, h.body)
			}
			time.Sleep(20 * time.Millisecond)
		}
		// The usage view counts the policy's admissions and refusals (over
		// both gateways when they share Redis), its quota the cap.
		var allowed, limited uint64
		for _, gw := range gws {
			gw.g.usage.Flush()
		}
		req, _ := http.NewRequest("GET", gws[0].admin+"/usage/"+res.VendorID+"?window=1h", nil)
		req.Header.Set("Authorization", "Bearer usage-admin-token-0123")
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var vu usage.VendorUsage
		if err := json.NewDecoder(resp.Body).Decode(&vu); err != nil {
			t.Fatal(err)
		}
		for _, p := range vu.Policies {
			if p.Limit != "downloads-at-once" {
				continue
			}
			if p.Quota != 2 {
				t.Fatalf("downloads-at-once quota %d in the usage view, want the cap 2", p.Quota)
			}
			for _, m := range p.Minutes {
				allowed, limited = allowed+m.Allowed, limited+m.Limited
			}
		}
		if allowed < 3 || limited < uint64(len(gws)) {
			t.Fatalf("usage of downloads-at-once: %d allowed, %d limited; want at least 3 and %d", allowed, limited, len(gws))
		}
	})
}

// TestConcurrencyPolicyRedisDown: Redis cannot count the slots, so a
// download answers 503 rate_limit_unavailable, as any limit that cannot
// decide. The reads row is shadow here, so that the concurrency policy is
// the one limit that must decide (a shadow check that cannot be decided
// lets the request go on).
func TestConcurrencyPolicyRedisDown(t *testing.T) {
	rs := testredis.Start(t)
	b := newTestBackend(t)
	gw := startGateway(t, b, func(o *Options) {
		o.Config.Redis.URL = config.List{rs.URL()}
		o.Config.Limits.Vendor.Reads.Shadow = true
		o.Config.Limits.Policies = []config.Policy{downloadsAtOnce(2)}
	})
	key, _ := b.addKey("vendor-a", wire.VendorApproved, time.Now().Add(time.Hour))
	report := gw.url + "/api/vendor/v1/orders/o1/reports/mvr"
	if a := do(t, "GET", report, key); a.status != 200 {
		t.Fatalf("download: %d %s", a.status, a.body)
	}
	rs.Stop()
	a := do(t, "GET", report, key)
	a.wantError(t, 503, apierr.RateLimitUnavailable)
	if gw.g.stores.Slots.(*concurrency.Redis).Held() != 0 {
		t.Fatal("a slot is held after the failed call")
	}
	// A read counts no concurrency policy: Redis down takes nothing from
	// it while its own limit is shadow.
	if a := do(t, "GET", gw.url+"/api/vendor/v1/me", key); a.status != 200 {
		t.Fatalf("a read with Redis down and only shadow limits: %d %s", a.status, a.body)
	}
}

// BenchmarkReportSlots is a report download through the handler on Redis,
// without and with a concurrency policy on reports: what a slot (one script
// call to take it, a batched one to give it back) adds to a request.
func BenchmarkReportSlots(b *testing.B) {
	rs := testredis.Start(b)
	for _, tc := range []struct {
		name     string
		policies []config.Policy
	}{{"none", nil}, {"slot", []config.Policy{downloadsAtOnce(1 << 20)}}} {
		b.Run(tc.name, func(b *testing.B) {
			rig := newHandlerRig(b, func(o *Options) {
				o.DisableAccessLog = true
				o.Config.Redis.URL = config.List{rs.URL()}
				o.Config.Limits.Policies = tc.policies
			})
			var req fasthttp.Request
			var ctx fasthttp.RequestCtx
			b.ReportAllocs()
			for b.Loop() {
				if err := rig.readPath(&req, &ctx, "/api/vendor/v1/orders/o1/reports/fast"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
